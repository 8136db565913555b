//! pmo-format (work in progress)
