//! The page sources an attachment's view calls on a fault: pages straight from the medium, or
//! decrypted and verified (and the predictor told of the fault).

use std::sync::Arc;

use pmo_medium::Medium;
use pmo_os::view::{FillError, PageSource, PAGE_SIZE};

use pmo_engine::engine::PmoCore;
use pmo_meta::error::Result;

/// Fills pages straight from the medium (no protection).
pub(crate) struct PlainSource {
    pub(crate) core: Arc<PmoCore>,
    pub(crate) medium: Arc<dyn Medium>,
    pub(crate) predict: Option<Arc<crate::predict::PredictHook>>,
}

impl PageSource for PlainSource {
    fn fill(&self, page_index: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError> {
        if let Some(p) = &self.predict {
            p.notify(page_index);
        }
        self.core
            .fill_page(&*self.medium, page_index, dst)
            .map_err(|reason| FillError { reason })
    }
    fn label(&self) -> &str {
        &self.core.name
    }
}

/// Fills a reader's pages as of its snapshot (`pmo_pool::reader`: readers beside a writer).
pub(crate) struct ReaderSource {
    pub(crate) core: Arc<PmoCore>,
    pub(crate) reader: Arc<pmo_pool::reader::ReaderState>,
    pub(crate) predict: Option<Arc<crate::predict::PredictHook>>,
}

impl PageSource for ReaderSource {
    fn fill(&self, page_index: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError> {
        if let Some(p) = &self.predict {
            p.notify(page_index);
        }
        self.reader
            .fill(&self.core, page_index, dst)
            .map_err(|reason| FillError { reason })
    }
    fn label(&self) -> &str {
        &self.core.name
    }
}

/// Fills pages by decrypting and verifying them (protected PMOs).
pub(crate) struct ProtectedSource {
    pub(crate) prot: Arc<pmo_engine::protect::Protection>,
    pub(crate) label: String,
    pub(crate) predict: Option<Arc<crate::predict::PredictHook>>,
}

impl PageSource for ProtectedSource {
    fn fill(&self, page_index: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError> {
        if let Some(p) = &self.predict {
            p.notify(page_index);
        }
        self.prot
            .fill(page_index, dst)
            .map_err(|reason| FillError { reason })
    }
    fn label(&self) -> &str {
        &self.label
    }
}
