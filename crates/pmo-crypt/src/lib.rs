//! pmo-crypt (work in progress)
