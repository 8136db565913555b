//! pmo-os (work in progress)
