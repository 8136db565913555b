//! pmo-cxlsim (work in progress)
