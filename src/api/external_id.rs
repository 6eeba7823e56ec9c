//! The schema of the ids a backend chooses, for the OpenAPI document.

use utoipa::ToSchema;
use utoipa::openapi::{ObjectBuilder, RefOr, Schema, Type};

/// An id the backend chose for one of its users or assistants (see `domain::ids`); in the
/// document only, where the handlers take a plain string.
pub struct ExternalId;

impl utoipa::PartialSchema for ExternalId {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("1 to 128 of letters, digits and - _ . : @ | + ="))
            .pattern(Some(EXTERNAL_ID_PATTERN))
            .min_length(Some(1))
            .max_length(Some(128))
            .into()
    }
}

impl ToSchema for ExternalId {
    fn name() -> std::borrow::Cow<'static, str> {
        "ExternalId".into()
    }
}

const EXTERNAL_ID_PATTERN: &str = "^[A-Za-z0-9._:@|+=-]+$";
