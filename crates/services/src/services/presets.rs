//! Admin presets: the allow-list of programs stdio servers may run.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use uuid::Uuid;

use crate::config::Settings;
use crate::domain::{NetworkMode, Preset, PresetSpec, SandboxSpec, SecretMap, Slot};
use crate::error::{Error, Resource, Result};
use crate::store::{Store, StoreError};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlotInput {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub required: bool,
    pub default: Option<String>,
    pub pattern: Option<String>,
}

/// A whole preset as the admin sends it (create and replace).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PresetInput {
    /// Required on create; on replace it may be omitted or must equal the path's name.
    #[schema(pattern = "^[a-z0-9_-]{1,64}$")]
    pub name: Option<String>,
    #[serde(default)]
    pub description: String,
    #[schema(min_length = 1)]
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub arg_slots: Vec<SlotInput>,
    #[serde(default)]
    pub env_slots: Vec<SlotInput>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub timeout_secs: Option<u32>,
    /// Memory each of its servers may use, in MiB (absent: the pool's default; 0: none).
    #[schema(maximum = 1048576)]
    pub memory_limit_mib: Option<u32>,
    /// Processes and threads each of its servers may run (absent: the pool's default;
    /// 0: none).
    #[schema(maximum = 4194304)]
    pub max_tasks: Option<u32>,
    /// What its servers' sandboxes share with them and let them reach (absent: the
    /// pool's defaults).
    #[serde(default)]
    pub sandbox: Option<SandboxInput>,
}

/// A preset's sandbox, as the admin writes it.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxInput {
    /// `none`, `egress` or `host` (absent: `pool.sandbox.network`).
    #[schema(pattern = "^(none|egress|host)$")]
    pub network: Option<String>,
    /// Absolute host paths its servers may read, at the same path.
    #[serde(default)]
    pub read_only_paths: Vec<String>,
    /// Absolute host paths its servers may write, at the same path (shared by all of them).
    #[serde(default)]
    pub writable_paths: Vec<String>,
    /// With `egress`: the only hosts (names or `*.suffix`) the proxy lets them reach.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

impl SandboxInput {
    fn into_spec(self) -> Result<SandboxSpec> {
        Ok(SandboxSpec {
            network: self
                .network
                .as_deref()
                .map(NetworkMode::parse)
                .transpose()?,
            read_only_paths: self.read_only_paths,
            writable_paths: self.writable_paths,
            allow_hosts: self.allow_hosts,
        })
    }
}

/// Highest per-preset memory limit: 1 TiB, in MiB.
const MAX_MEMORY_LIMIT_MIB: u32 = 1 << 20;
/// Highest per-preset task limit: the kernel's own ceiling on pids.
const MAX_TASKS: u32 = 1 << 22;

impl From<SlotInput> for Slot {
    fn from(input: SlotInput) -> Self {
        Slot {
            name: input.name,
            description: input.description,
            required: input.required,
            default: input.default,
            pattern: input.pattern,
        }
    }
}

#[derive(Clone)]
pub struct PresetService {
    store: Store,
    settings: Arc<Settings>,
}

impl PresetService {
    pub fn new(store: Store, settings: Arc<Settings>) -> Self {
        Self { store, settings }
    }

    pub async fn list(&self) -> Result<Vec<Preset>> {
        Ok(self.store.presets().list().await?)
    }

    pub async fn get(&self, name: &str) -> Result<Preset> {
        self.store
            .presets()
            .get(name)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::Preset, name.to_owned()))
    }

    pub async fn create(&self, input: PresetInput) -> Result<Preset> {
        let name = input
            .name
            .clone()
            .ok_or_else(|| Error::validation("name is required"))?;
        let spec = self.build_spec(name, input, &SecretMap::default())?;
        let now = crate::domain::now();
        let preset = Preset {
            id: Uuid::now_v7(),
            spec,
            created_at: now,
            updated_at: now,
        };
        self.store
            .presets()
            .insert(&preset)
            .await
            .map_err(|e| match e {
                StoreError::Duplicate => Error::Conflict(format!(
                    "a preset named '{}' already exists",
                    preset.spec.name
                )),
                other => other.into(),
            })?;
        tracing::info!(preset = %preset.spec.name, command = %preset.spec.command, "preset created");
        Ok(preset)
    }

    /// Replaces a preset. Its name is its identity (servers refer to it), so it cannot change.
    pub async fn replace(&self, name: &str, input: PresetInput) -> Result<Preset> {
        let mut preset = self.get(name).await?;
        if input.name.as_deref().is_some_and(|n| n != name) {
            return Err(Error::validation(
                "a preset cannot be renamed; create a new one instead",
            ));
        }
        preset.spec = self.build_spec(name.to_owned(), input, &preset.spec.env)?;
        preset.updated_at = crate::domain::now();
        if !self.store.presets().update(&preset).await? {
            return Err(Error::NotFound(Resource::Preset, name.to_owned()));
        }
        tracing::info!(preset = %name, "preset replaced");
        Ok(preset)
    }

    pub async fn delete(&self, name: &str) -> Result<()> {
        let users = self.store.servers().count_using_preset(name).await?;
        if users > 0 {
            return Err(Error::Conflict(format!(
                "preset '{name}' is used by {users} MCP server(s); delete or change them first"
            )));
        }
        if !self.store.presets().delete(name).await? {
            return Err(Error::NotFound(Resource::Preset, name.to_owned()));
        }
        tracing::info!(preset = %name, "preset deleted");
        Ok(())
    }

    fn build_spec(
        &self,
        name: String,
        input: PresetInput,
        current_env: &SecretMap,
    ) -> Result<PresetSpec> {
        let max_timeout = self.settings.pool.max_call_timeout_secs;
        if input
            .timeout_secs
            .is_some_and(|t| t == 0 || t > max_timeout)
        {
            return Err(Error::validation(format!(
                "timeoutSecs must be between 1 and {max_timeout}"
            )));
        }
        if input
            .memory_limit_mib
            .is_some_and(|m| m > MAX_MEMORY_LIMIT_MIB)
        {
            return Err(Error::validation(format!(
                "memoryLimitMib must be at most {MAX_MEMORY_LIMIT_MIB} (0: no limit)"
            )));
        }
        if input.max_tasks.is_some_and(|t| t > MAX_TASKS) {
            return Err(Error::validation(format!(
                "maxTasks must be at most {MAX_TASKS} (0: no limit)"
            )));
        }
        let spec = PresetSpec {
            name,
            description: input.description,
            command: input.command,
            args: input.args,
            arg_slots: input.arg_slots.into_iter().map(Slot::from).collect(),
            env_slots: input.env_slots.into_iter().map(Slot::from).collect(),
            env: current_env.merge_update(input.env),
            timeout_secs: input.timeout_secs,
            memory_limit_mib: input.memory_limit_mib,
            max_tasks: input.max_tasks,
            sandbox: input.sandbox.unwrap_or_default().into_spec()?,
        };
        spec.validate()?;
        Ok(spec)
    }
}
