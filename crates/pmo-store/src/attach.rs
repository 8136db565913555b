//! Mapped attach (placeholder until the view layer lands).
/// Options of a mapped attach.
#[derive(Clone, Debug, Default)]
pub struct AttachOptions {}
/// A mapped attachment.
pub struct Attachment {}
