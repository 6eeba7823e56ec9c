//! The `mcp-pool` binary: parses the command line and calls into the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use mcp_pool::security::ApiKeyRole;
use mcp_pool::services::{CatalogService, KeyService, RegistrySync};
use mcp_pool::{Application, Settings, startup, store, telemetry};

/// Long-running, connection-churning service: jemalloc returns reaped sessions' memory
/// where glibc malloc fragments (BENCHMARKS.md, `actors`).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "mcp-pool",
    version,
    about = "Multi-tenant MCP connection-pool service"
)]
struct Cli {
    /// An extra configuration file, layered over config/default.toml and config/local.toml.
    #[arg(long, global = true, env = "MCP_POOL_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (the default when no command is given).
    Serve,
    /// Create or upgrade the database schema, then exit.
    Migrate,
    /// Manage API keys directly in the database.
    Keys {
        #[command(subcommand)]
        action: KeysCommand,
    },
    /// Manage the server catalog directly in the database.
    Catalog {
        #[command(subcommand)]
        action: CatalogCommand,
    },
    /// Inspect the configuration.
    Config {
        #[command(subcommand)]
        action: ConfigCommand,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key and print it (it is shown only this once).
    Create {
        #[arg(long, value_enum)]
        role: Role,
        #[arg(long, default_value = "created with the CLI")]
        name: String,
    },
}

#[derive(Subcommand)]
enum CatalogCommand {
    /// Import server.json files, or every *.json file of a directory, or a Registry API.
    /// Imported entries are disabled until enabled (console or PATCH /admin/catalog/…).
    Import {
        /// Files or directories of server.json documents.
        paths: Vec<PathBuf>,
        /// A Registry API's base URL to import from instead (e.g.
        /// https://registry.modelcontextprotocol.io).
        #[arg(long, conflicts_with = "paths")]
        registry: Option<String>,
        /// With --registry: only what changed since this time (RFC 3339).
        #[arg(long, requires = "registry")]
        updated_since: Option<chrono::DateTime<chrono::Utc>>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Load and validate every configuration layer, then print the effective settings.
    Check,
}

#[derive(Clone, Copy, ValueEnum)]
enum Role {
    Service,
    Admin,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("mcp-pool: {err}");
            return ExitCode::from(2);
        }
    };
    let _telemetry = telemetry::init(&settings.log);
    match run(cli.command.unwrap_or(Command::Serve), settings).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("mcp-pool: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, settings: Settings) -> anyhow::Result<()> {
    match command {
        Command::Serve => {
            // Where an operator signs in (with an admin key), once the port is known.
            let console_host = settings
                .console
                .enabled
                .then(|| settings.server.host.clone());
            let mut app = Application::build(settings).await?;
            if let Some(key) = app.take_generated_admin_key() {
                println!(
                    "\n  First start: created an admin API key. It is shown only now; keep it safe:\n\n    {key}\n"
                );
            }
            if let Some(host) = console_host {
                println!("  Console: http://{host}:{}/console", app.port());
            }
            app.run_until_stopped().await?;
        }
        Command::Migrate => {
            startup::open_store(&settings).await?.close().await;
            println!("database is up to date");
        }
        Command::Keys {
            action: KeysCommand::Create { role, name },
        } => {
            let store = startup::open_store(&settings).await?;
            let keys = KeyService::new(store.clone(), &settings);
            let role = match role {
                Role::Service => ApiKeyRole::Service,
                Role::Admin => ApiKeyRole::Admin,
            };
            let (record, secret) = keys.create(&name, role).await?;
            println!("{secret}");
            eprintln!(
                "created {} key {} ({})",
                role.as_str(),
                record.id,
                record.name
            );
            store.close().await;
        }
        Command::Catalog {
            action:
                CatalogCommand::Import {
                    paths,
                    registry,
                    updated_since,
                },
        } => {
            let store = startup::open_store(&settings).await?;
            let catalog = CatalogService::new(store.clone(), std::sync::Arc::new(settings));
            let imported = match registry {
                Some(registry) => {
                    let report = catalog
                        .sync(RegistrySync {
                            registry,
                            updated_since,
                        })
                        .await?;
                    for skipped in &report.skipped {
                        eprintln!(
                            "skipped {}@{}: {}",
                            skipped.name, skipped.version, skipped.reason
                        );
                    }
                    report.imported
                }
                None => catalog.import(read_documents(&paths)?).await?,
            };
            for entry in &imported {
                println!("{} {} {}", entry.outcome, entry.name, entry.version);
            }
            eprintln!("imported {} document(s)", imported.len());
            store.close().await;
        }
        Command::Config {
            action: ConfigCommand::Check,
        } => {
            let database = store::database_url(&settings);
            let shown = if database.starts_with("sqlite:") {
                database
            } else {
                "(external database; URL hidden)".into()
            };
            println!("configuration OK");
            println!(
                "  listen      {}:{}",
                settings.server.host, settings.server.port
            );
            println!("  database    {shown}");
            println!("  data dir    {}", settings.storage.data_dir.display());
            println!(
                "  pool        connect {}s, tool cache {}s, idle {}s, call timeout {}s",
                settings.pool.connect_timeout_secs,
                settings.pool.tool_cache_ttl_secs,
                settings.pool.idle_timeout_secs,
                settings.pool.default_call_timeout_secs
            );
            println!(
                "  agent       max tool rounds {}",
                settings.agent.max_tool_rounds
            );
            println!(
                "  confirm     timeout {}s",
                settings.confirmation.timeout_secs
            );
        }
    }
    Ok(())
}

/// The documents of `paths`: each file, and each `*.json` file of each directory (sorted, so
/// an import's order is the same every time).
fn read_documents(paths: &[PathBuf]) -> anyhow::Result<Vec<serde_json::Value>> {
    use anyhow::Context;
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    if files.is_empty() {
        anyhow::bail!("no server.json documents given (files, or directories of *.json files)");
    }
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))
        })
        .collect()
}
