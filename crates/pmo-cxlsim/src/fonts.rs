//! The font plotters measures (and would draw) text with: DejaVu Sans compiled in, registered
//! for every family the figures name. With plotters' `ab_glyph` feature (which pmo-bench turns
//! on for its PNG figures, so a workspace build has it) a family nobody registered is an error.

use plotters::style::FontStyle;

/// Register the fonts once; later calls do nothing.
pub(crate) fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for family in ["sans-serif", "serif", "monospace"] {
            for (style, bytes) in [
                (FontStyle::Normal, dejavu::sans::regular()),
                (FontStyle::Bold, dejavu::sans::bold()),
                (FontStyle::Italic, dejavu::sans::oblique()),
                (FontStyle::Oblique, dejavu::sans::oblique()),
            ] {
                // A valid TrueType font compiled in: registering it cannot fail.
                let _ = plotters::style::register_font(family, style, bytes);
            }
        }
    });
}
