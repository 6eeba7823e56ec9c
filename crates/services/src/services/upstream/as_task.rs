//! A REST (or gRPC) call run as a task: `Prefer: respond-async` on
//! `POST /api/mcp-servers/{id}/tools/{tool}/call`.

use std::time::Duration;

use serde_json::Value;

use super::{Caller, UpstreamService};
use crate::domain::{CallOrigin, CallVia, TaskOrigin, UserId};
use crate::error::{Error, Resource, Result};
use crate::pool::ConnectionKey;
use crate::services::tasks::{NewTask, Started, TaskEnd, TaskHandle, TaskWork, Tasks};
use crate::services::tool_calls::limit_result_in_place;
use crate::store::{StoredTask, UpstreamTask};

impl UpstreamService {
    /// The work that follows on `task`'s server task after the instance following it
    /// stopped (`Tasks::settle_orphans`); `None` for a task that follows none. What the
    /// server asks meanwhile goes to the user's event stream (the gateway client that
    /// started it may be gone).
    pub fn follow_on(&self, task: &StoredTask, handle: TaskHandle) -> Option<TaskWork> {
        let upstream = task.upstream.clone()?;
        let (service, user) = (self.clone(), task.user_id.clone());
        let timeout = Duration::from_secs(self.settings.tasks.call_timeout_secs);
        let max_bytes = self.settings.limits.max_result_bytes;
        Some(Box::pin(async move {
            let (live, progress) = tokio::sync::mpsc::unbounded_channel();
            let followed = service.follow_again(&user, &upstream, timeout, &live);
            match handle.saying(followed, progress).await {
                Ok(result) => completed(limit_result_in_place(result, max_bytes)),
                Err(error) => TaskEnd::failure(&error),
            }
        }))
    }

    async fn follow_again(
        &self,
        user: &UserId,
        upstream: &UpstreamTask,
        timeout: Duration,
        live: &tokio::sync::mpsc::UnboundedSender<crate::mcp::Progress>,
    ) -> Result<rmcp::model::CallToolResult> {
        let lease = self
            .lease_in(user, &upstream.server_id.to_string(), None)
            .await?;
        let server = &lease.runtime.server;
        let asker =
            (server.user_id != UserId::global()).then(|| self.elicitations.for_user(server));
        let result = lease
            .client
            .follow_task_again(&upstream.task_id, timeout, Some(live), asker)
            .await
            .inspect_err(|e| self.pool.report(&lease, e))?;
        Ok(result)
    }

    /// The name of one of the user's servers (or a global one), without connecting.
    pub(super) async fn server_name(&self, user: &UserId, server_id: &str) -> Result<String> {
        let missing = || Error::NotFound(Resource::McpServer, server_id.to_owned());
        let id = uuid::Uuid::parse_str(server_id).map_err(|_| missing())?;
        if let Some(server) = self.globals.get(id) {
            return Ok(server.spec.name.as_str().to_owned());
        }
        if let Some(runtime) = self
            .pool
            .runtime_of(&ConnectionKey::shared(user.clone(), id))
        {
            // A member who left the team keeps a live connection for a moment: refused
            // now, as the call would be.
            if let Some(group) = &runtime.server.team
                && !self.policies.attributes(user).await?.groups.contains(group)
            {
                return Err(missing());
            }
            return Ok(runtime.server.spec.name.as_str().to_owned());
        }
        // A team server of one of the user's groups too, as a call finds it.
        let server = self
            .store
            .servers()
            .usable(user, id)
            .await?
            .ok_or_else(missing)?;
        Ok(server.spec.name.as_str().to_owned())
    }

    /// Starts `tool` of `server_id` as a task of `user` and returns it at once; the call
    /// goes on for up to `tasks.call_timeout_secs`, its progress messages becoming the
    /// task's status message, what the server asks meanwhile going to the user's event
    /// stream as for any REST call.
    pub async fn call_tool_as_task(
        &self,
        tasks: &Tasks,
        user: &UserId,
        server_id: &str,
        tool: &str,
        arguments: Value,
        who: CallOrigin,
    ) -> Result<StoredTask> {
        let origin = match who.via {
            CallVia::Grpc => TaskOrigin::Grpc,
            CallVia::Gateway | CallVia::Xiaozhi => TaskOrigin::Gateway,
            CallVia::Rest | CallVia::Chat => TaskOrigin::Rest,
        };
        let new = NewTask {
            user: user.clone(),
            assistant: None,
            origin,
            server_name: self.server_name(user, server_id).await?,
            tool_name: tool.to_owned(),
        };
        let (upstream, user) = (self.clone(), user.clone());
        let (server_id, tool) = (server_id.to_owned(), tool.to_owned());
        let timeout = tasks.call_timeout();
        // Kept as a row: cut by the rule results given to a model are cut by.
        let max_bytes = self.settings.limits.max_result_bytes;
        let started = tasks
            .start(new, None, move |handle| {
                Box::pin(async move {
                    let (live, progress) = tokio::sync::mpsc::unbounded_channel();
                    let following = handle.clone();
                    let caller = Caller {
                        live: Some(&live),
                        timeout: Some(timeout),
                        origin: who,
                        became_task: Some(Box::new(move |upstream| following.follows(upstream))),
                        ..Caller::default()
                    };
                    let call =
                        upstream.call_tool_reporting(&user, &server_id, &tool, arguments, caller);
                    match handle.saying(call, progress).await {
                        Ok(report) => {
                            completed(limit_result_in_place(report.outcome.result, max_bytes))
                        }
                        Err(error) => TaskEnd::failure(&error),
                    }
                })
            })
            .await?;
        match started {
            Started::Task(task) => Ok(*task),
            Started::Inline(_) => Err(Error::Unexpected(anyhow::anyhow!(
                "a task without an inline wait was answered inline"
            ))),
        }
    }
}

/// A call's result as a task keeps it, `isError` always said.
fn completed(result: rmcp::model::CallToolResult) -> TaskEnd {
    let is_error = result.is_error.unwrap_or(false);
    let mut result = serde_json::to_value(&result).unwrap_or_default();
    if let Value::Object(map) = &mut result {
        map.insert("isError".into(), Value::Bool(is_error));
    }
    TaskEnd::Completed(result)
}
