//! pmo-alloc (work in progress)
