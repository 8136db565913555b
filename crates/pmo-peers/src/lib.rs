//! pmo-peers (work in progress)
