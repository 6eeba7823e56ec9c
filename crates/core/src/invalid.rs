//! What the domain's parsers and the URL policy refuse in what a person gave.
//!
//! The ground floor cannot know the service's error (it wraps the layers above); it
//! reports this, which the service's `Error` turns into `VALIDATION_ERROR` or
//! `URL_NOT_ALLOWED`, keeping the message.

/// A value refused, with the sentence a person reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidInput {
    /// Well-formed but not acceptable (a name too long, an unknown transport).
    #[error("{0}")]
    Value(String),
    /// A URL that points somewhere the URL policy does not allow.
    #[error("{0}")]
    UrlNotAllowed(String),
}

impl InvalidInput {
    pub fn value(message: impl Into<String>) -> Self {
        InvalidInput::Value(message.into())
    }
}
