//! pmo-capi (work in progress)
