//! The `presets` table (admin-defined stdio commands).

use std::sync::Arc;

use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde::{Deserialize, Serialize};

use super::entities::preset;
use super::{Db, StoreError, from_json, open_map, seal_map};
use crate::domain::{NetworkMode, Preset, PresetSpec, SandboxSpec, Slot};
use crate::security::Cipher;

/// How a slot is kept in its JSON column; private to the store.
#[derive(Serialize, Deserialize)]
struct StoredSlot {
    name: String,
    description: String,
    required: bool,
    default: Option<String>,
    pattern: Option<String>,
}

impl From<&Slot> for StoredSlot {
    fn from(slot: &Slot) -> Self {
        Self {
            name: slot.name.clone(),
            description: slot.description.clone(),
            required: slot.required,
            default: slot.default.clone(),
            pattern: slot.pattern.clone(),
        }
    }
}

impl From<StoredSlot> for Slot {
    fn from(slot: StoredSlot) -> Self {
        Self {
            name: slot.name,
            description: slot.description,
            required: slot.required,
            default: slot.default,
            pattern: slot.pattern,
        }
    }
}

fn slots_json(slots: &[Slot]) -> serde_json::Value {
    serde_json::json!(slots.iter().map(StoredSlot::from).collect::<Vec<_>>())
}

fn slots_from(column: &str, value: serde_json::Value) -> Result<Vec<Slot>, StoreError> {
    let stored: Vec<StoredSlot> = from_json(column, value)?;
    Ok(stored.into_iter().map(Slot::from).collect())
}

#[derive(Debug, Clone)]
pub struct PresetRepo {
    db: Db,
    cipher: Arc<Cipher>,
}

impl PresetRepo {
    pub(super) fn new(db: Db, cipher: Arc<Cipher>) -> Self {
        Self { db, cipher }
    }

    pub async fn list(&self) -> Result<Vec<Preset>, StoreError> {
        preset::Entity::find()
            .order_by_asc(preset::Column::Name)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| self.to_domain(row))
            .collect()
    }

    pub async fn get(&self, name: &str) -> Result<Option<Preset>, StoreError> {
        preset::Entity::find()
            .filter(preset::Column::Name.eq(name))
            .one(self.db.reader()?)
            .await?
            .map(|row| self.to_domain(row))
            .transpose()
    }

    pub async fn insert(&self, preset: &Preset) -> Result<(), StoreError> {
        preset::Entity::insert(self.to_row(preset))
            .exec_without_returning(self.db.writer()?)
            .await?;
        Ok(())
    }

    pub async fn update(&self, preset: &Preset) -> Result<bool, StoreError> {
        let result = preset::Entity::update_many()
            .set(self.to_row(preset))
            .filter(preset::Column::Id.eq(preset.id))
            .exec(self.db.writer()?)
            .await?;
        Ok(result.rows_affected == 1)
    }

    pub async fn delete(&self, name: &str) -> Result<bool, StoreError> {
        let result = preset::Entity::delete_many()
            .filter(preset::Column::Name.eq(name))
            .exec(self.db.writer()?)
            .await?;
        Ok(result.rows_affected == 1)
    }

    fn to_row(&self, preset: &Preset) -> preset::ActiveModel {
        let spec = &preset.spec;
        preset::ActiveModel {
            id: Set(preset.id),
            name: Set(spec.name.clone()),
            description: Set(spec.description.clone()),
            command: Set(spec.command.clone()),
            args: Set(serde_json::json!(spec.args)),
            arg_slots: Set(slots_json(&spec.arg_slots)),
            env_slots: Set(slots_json(&spec.env_slots)),
            env: Set(seal_map(&self.cipher, &spec.env)),
            timeout_secs: Set(spec.timeout_secs.map(|t| t as i32)),
            memory_limit_mib: Set(spec.memory_limit_mib.map(|m| m as i32)),
            max_tasks: Set(spec.max_tasks.map(|t| t as i32)),
            sandbox: Set((!spec.sandbox.is_default()).then(|| sandbox_json(&spec.sandbox))),
            created_at: Set(preset.created_at),
            updated_at: Set(preset.updated_at),
        }
    }

    fn to_domain(&self, row: preset::Model) -> Result<Preset, StoreError> {
        Ok(Preset {
            id: row.id,
            spec: PresetSpec {
                name: row.name,
                description: row.description,
                command: row.command,
                args: from_json("args", row.args)?,
                arg_slots: slots_from("arg_slots", row.arg_slots)?,
                env_slots: slots_from("env_slots", row.env_slots)?,
                env: open_map(&self.cipher, row.env.as_deref())?,
                timeout_secs: row.timeout_secs.map(|t| t.max(0) as u32),
                memory_limit_mib: row.memory_limit_mib.map(|m| m.max(0) as u32),
                max_tasks: row.max_tasks.map(|t| t.max(0) as u32),
                sandbox: match row.sandbox {
                    Some(json) => sandbox_from(json)?,
                    None => SandboxSpec::default(),
                },
            },
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

fn sandbox_json(spec: &SandboxSpec) -> serde_json::Value {
    serde_json::json!({
        "network": spec.network.map(|n| n.as_str()),
        "readOnlyPaths": spec.read_only_paths,
        "writablePaths": spec.writable_paths,
        "allowHosts": spec.allow_hosts,
    })
}

fn sandbox_from(json: serde_json::Value) -> Result<SandboxSpec, StoreError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Stored {
        network: Option<NetworkMode>,
        #[serde(default)]
        read_only_paths: Vec<String>,
        #[serde(default)]
        writable_paths: Vec<String>,
        #[serde(default)]
        allow_hosts: Vec<String>,
    }
    let stored: Stored = from_json("sandbox", json)?;
    Ok(SandboxSpec {
        network: stored.network,
        read_only_paths: stored.read_only_paths,
        writable_paths: stored.writable_paths,
        allow_hosts: stored.allow_hosts,
    })
}
