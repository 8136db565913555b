//! Process-wide limits, in a binary of its own: this test fills the registry of live views,
//! which would disturb concurrently running tests.

#[path = "view_common.rs"]
mod view_common;

use pmo_os::view::{live_views, ViewError, MAX_VIEWS};
use view_common::*;

#[test]
fn registry_is_bounded_and_slots_are_reused() {
    for m in mechanisms() {
        let before = live_views();
        let mut views = Vec::new();
        let err = loop {
            match m.create(m.options(1, false), Pattern::new("many")) {
                Ok(v) => views.push(v),
                Err(e) => break e,
            }
            assert!(
                views.len() <= MAX_VIEWS,
                "{m}: registry grew past its bound"
            );
        };
        assert!(
            matches!(err, ViewError::TooManyViews { max } if max == MAX_VIEWS),
            "{m}: {err}"
        );
        assert_eq!(views.len(), MAX_VIEWS - before, "{m}");
        assert_eq!(read(&views[7], 0, 0), word(0, 0));
        // Free one slot in the middle: exactly one more view fits, and it works.
        views.swap_remove(10);
        let extra = view(m, 2, true, Pattern::new("extra"));
        write(&extra, 1, 0, 3);
        assert_eq!(dirty(&extra), vec![1], "{m}");
        assert!(matches!(
            m.create(m.options(1, false), Pattern::new("one too many")),
            Err(ViewError::TooManyViews { .. })
        ));
        drop(extra);
        drop(views);
        assert_eq!(live_views(), before, "{m}");
    }
}
