//! pmo-store (work in progress)
