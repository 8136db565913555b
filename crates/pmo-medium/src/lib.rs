//! pmo-medium (work in progress)
