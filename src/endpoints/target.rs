//! One endpoint as its jobs' bodies call it (version 1's single call in `jobs`, version 2's loop
//! in `stepped`): where, with which secret, through which client, and where to report health.

use std::sync::Arc;

use super::caller::Caller;
use super::reports::Reports;

/// One endpoint as its jobs' bodies call it.
pub(crate) struct Target {
    pub(crate) id: String,
    pub(crate) url: String,
    pub(crate) secret: String,
    pub(crate) caller: Caller,
    pub(crate) reports: Arc<Reports>,
    pub(crate) clock: crate::clock::SharedClock,
}
