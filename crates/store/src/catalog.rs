//! The `catalog_entries` and `catalog_versions` tables: every imported version of an entry
//! kept, and the operator's choices per entry.

use std::sync::Arc;

use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, TransactionTrait,
};

use super::entities::{catalog_entry, catalog_version};
use super::{Db, StoreError, contains, corrupt, from_json, open_map, seal_map};
use crate::domain::{CatalogEntry, CatalogVersion, EntryKind, newer_version};
use crate::security::Cipher;

/// What an import did to an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Imported {
    /// A new entry (disabled until the operator enables it).
    Created,
    /// A version the entry did not have.
    NewVersion,
    /// The same name and version again: its document replaced.
    Replaced,
}

/// A version's summary for the entry row: what listing and search read.
pub struct CatalogSummary<'a> {
    pub title: &'a str,
    pub description: &'a str,
    pub kind: EntryKind,
    pub tags: &'a [String],
}

#[derive(Debug, Clone)]
pub struct CatalogRepo {
    db: Db,
    cipher: Arc<Cipher>,
}

impl CatalogRepo {
    pub(super) fn new(db: Db, cipher: Arc<Cipher>) -> Self {
        Self { db, cipher }
    }

    /// Stores one version; the entry's latest version (and its summary) moves when this one
    /// is newer, which the second value says. In one transaction, so concurrent imports of
    /// one entry stay consistent.
    pub async fn import(
        &self,
        version: &CatalogVersion,
        summary: CatalogSummary<'_>,
    ) -> Result<(Imported, bool), StoreError> {
        let txn = self.db.writer()?.begin().await?;
        let existing =
            catalog_version::Entity::find_by_id((version.name.clone(), version.version.clone()))
                .one(&txn)
                .await?;
        catalog_version::Entity::insert(catalog_version::ActiveModel {
            name: Set(version.name.clone()),
            version: Set(version.version.clone()),
            document: Set(version.document.clone()),
            imported_at: Set(version.imported_at),
        })
        .on_conflict(
            OnConflict::columns([
                catalog_version::Column::Name,
                catalog_version::Column::Version,
            ])
            .update_columns([
                catalog_version::Column::Document,
                catalog_version::Column::ImportedAt,
            ])
            .to_owned(),
        )
        .exec_without_returning(&txn)
        .await?;
        let entry = catalog_entry::Entity::find_by_id(version.name.clone())
            .one(&txn)
            .await?;
        let tags = format!(" {} ", summary.tags.join(" "));
        let outcome = match entry {
            None => {
                catalog_entry::Entity::insert(catalog_entry::ActiveModel {
                    name: Set(version.name.clone()),
                    enabled: Set(false),
                    latest_version: Set(version.version.clone()),
                    pinned_version: Set(None),
                    fixed_values: Set(None),
                    patterns: Set(serde_json::json!({})),
                    title: Set(summary.title.to_owned()),
                    description: Set(summary.description.to_owned()),
                    kind: Set(summary.kind.as_str().to_owned()),
                    tags: Set(tags),
                    created_at: Set(version.imported_at),
                    updated_at: Set(version.imported_at),
                })
                .exec_without_returning(&txn)
                .await?;
                (Imported::Created, true)
            }
            Some(row) => {
                let latest = row.latest_version == version.version
                    || newer_version(&version.version, &row.latest_version);
                if latest {
                    catalog_entry::Entity::update_many()
                        .set(catalog_entry::ActiveModel {
                            latest_version: Set(version.version.clone()),
                            title: Set(summary.title.to_owned()),
                            description: Set(summary.description.to_owned()),
                            kind: Set(summary.kind.as_str().to_owned()),
                            tags: Set(tags),
                            updated_at: Set(version.imported_at),
                            ..Default::default()
                        })
                        .filter(catalog_entry::Column::Name.eq(&version.name))
                        .exec(&txn)
                        .await?;
                }
                let imported = if existing.is_some() {
                    Imported::Replaced
                } else {
                    Imported::NewVersion
                };
                (imported, latest)
            }
        };
        txn.commit().await?;
        Ok(outcome)
    }

    pub async fn get(&self, name: &str) -> Result<Option<CatalogEntry>, StoreError> {
        catalog_entry::Entity::find_by_id(name.to_owned())
            .one(self.db.reader()?)
            .await?
            .map(|row| self.to_domain(row))
            .transpose()
    }

    pub async fn version(
        &self,
        name: &str,
        version: &str,
    ) -> Result<Option<CatalogVersion>, StoreError> {
        Ok(
            catalog_version::Entity::find_by_id((name.to_owned(), version.to_owned()))
                .one(self.db.reader()?)
                .await?
                .map(|row| CatalogVersion {
                    name: row.name,
                    version: row.version,
                    document: row.document,
                    imported_at: row.imported_at,
                }),
        )
    }

    /// An entry's versions, newest import first.
    pub async fn versions(&self, name: &str) -> Result<Vec<String>, StoreError> {
        Ok(catalog_version::Entity::find()
            .select_only()
            .column(catalog_version::Column::Version)
            .filter(catalog_version::Column::Name.eq(name))
            .order_by_desc(catalog_version::Column::ImportedAt)
            .into_tuple::<String>()
            .all(self.db.reader()?)
            .await?)
    }

    /// A page of entries by name, and how many match: `search` in the name, title,
    /// description or tags; `tag` one tag exactly; `enabled_only` for what users may use.
    pub async fn search(
        &self,
        search: Option<&str>,
        tag: Option<&str>,
        enabled_only: bool,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<CatalogEntry>, u64), StoreError> {
        let mut condition = Condition::all();
        if enabled_only {
            condition = condition.add(catalog_entry::Column::Enabled.eq(true));
        }
        if let Some(search) = search.filter(|s| !s.is_empty()) {
            condition = condition.add(
                Condition::any()
                    .add(contains(catalog_entry::Column::Name, search))
                    .add(contains(catalog_entry::Column::Title, search))
                    .add(contains(catalog_entry::Column::Description, search))
                    .add(contains(catalog_entry::Column::Tags, search)),
            );
        }
        if let Some(tag) = tag.filter(|t| !t.is_empty()) {
            condition = condition.add(contains(catalog_entry::Column::Tags, &format!(" {tag} ")));
        }
        let query = catalog_entry::Entity::find().filter(condition);
        let total = query.clone().count(self.db.reader()?).await?;
        let entries = query
            .order_by_asc(catalog_entry::Column::Name)
            .offset(offset)
            .limit(limit)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| self.to_domain(row))
            .collect::<Result<_, _>>()?;
        Ok((entries, total))
    }

    pub async fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(catalog_entry::Entity::find()
            .one(self.db.reader()?)
            .await?
            .is_none())
    }

    /// Saves the operator's choices (enabled, pinned version, fixed values, patterns).
    pub async fn update_choices(&self, entry: &CatalogEntry) -> Result<bool, StoreError> {
        let result = catalog_entry::Entity::update_many()
            .set(catalog_entry::ActiveModel {
                enabled: Set(entry.enabled),
                pinned_version: Set(entry.pinned_version.clone()),
                fixed_values: Set(seal_map(&self.cipher, &entry.fixed)),
                patterns: Set(serde_json::json!(entry.patterns)),
                updated_at: Set(entry.updated_at),
                ..Default::default()
            })
            .filter(catalog_entry::Column::Name.eq(&entry.name))
            .exec(self.db.writer()?)
            .await?;
        Ok(result.rows_affected == 1)
    }

    /// Removes an entry and all its versions.
    pub async fn delete(&self, name: &str) -> Result<bool, StoreError> {
        let txn = self.db.writer()?.begin().await?;
        catalog_version::Entity::delete_many()
            .filter(catalog_version::Column::Name.eq(name))
            .exec(&txn)
            .await?;
        let result = catalog_entry::Entity::delete_many()
            .filter(catalog_entry::Column::Name.eq(name))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        Ok(result.rows_affected == 1)
    }

    fn to_domain(&self, row: catalog_entry::Model) -> Result<CatalogEntry, StoreError> {
        Ok(CatalogEntry {
            name: row.name,
            enabled: row.enabled,
            latest_version: row.latest_version,
            pinned_version: row.pinned_version,
            fixed: open_map(&self.cipher, row.fixed_values.as_deref())?,
            patterns: from_json("patterns", row.patterns)?,
            title: row.title,
            description: row.description,
            kind: EntryKind::parse(&row.kind).map_err(|e| corrupt("kind", e))?,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}
