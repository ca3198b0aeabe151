//! [`RunError`], why a run could not start or go on: shared by the runner, the lanes' setup
//! and the fanout scenario, which all import it from here.

use crate::workload::WorkloadError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Workload(#[from] WorkloadError),
    #[error("{0}")]
    Endpoint(#[from] crate::endpoint::EndpointError),
    #[error("preparing the run: {0}")]
    Prepare(String),
    #[error("{0}")]
    Connect(String),
    #[error("{0}")]
    Http(#[from] crate::http::HttpError),
    #[error("{0}")]
    Generator(#[from] crate::dist::DistError),
}
