//! A 2026-07-28 server's notices: it has no session stream, and sends list changes and
//! resource updates only on a `subscriptions/listen` request the client keeps open. One is
//! kept open per session, for the lists the server says change and the resources its
//! users subscribed to (a new subscription opens it again with the new filter); what
//! arrives goes where an older server's notices go.

use std::collections::BTreeSet;
use std::sync::Mutex;

use rmcp::RoleClient;
use rmcp::model::{ServerNotification, SubscriptionFilter};
use tokio::sync::mpsc;

use super::handler::UpstreamEvents;

pub(super) struct ChangeListener {
    peer: rmcp::Peer<RoleClient>,
    events: mpsc::UnboundedSender<UpstreamEvents>,
    label: String,
    /// The list changes the server announced it sends.
    lists: SubscriptionFilter,
    /// Whether it offers resource subscriptions at all.
    subscribable: bool,
    resources: Mutex<BTreeSet<String>>,
    /// The listening task; replaced when the filter changes, stopped with the session.
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl ChangeListener {
    /// For a session of a revision without a session stream (2026-07-28); `None` for
    /// older ones and for a server that announces nothing to listen to.
    pub(super) fn start<S: rmcp::Service<RoleClient>>(
        service: &rmcp::service::RunningService<RoleClient, S>,
        events: mpsc::UnboundedSender<UpstreamEvents>,
        label: &str,
    ) -> Option<Self> {
        let info = service.peer().peer_info()?;
        if info.protocol_version.has_initialize() {
            return None;
        }
        let capabilities = &info.capabilities;
        let changes = |list_changed: Option<bool>| list_changed.filter(|changes| *changes);
        let mut lists = SubscriptionFilter::new();
        lists.tools_list_changed =
            changes(capabilities.tools.as_ref().and_then(|t| t.list_changed));
        lists.prompts_list_changed =
            changes(capabilities.prompts.as_ref().and_then(|p| p.list_changed));
        lists.resources_list_changed =
            changes(capabilities.resources.as_ref().and_then(|r| r.list_changed));
        let subscribable = capabilities
            .resources
            .as_ref()
            .and_then(|r| r.subscribe)
            .unwrap_or(false);
        if lists == SubscriptionFilter::default() && !subscribable {
            return None;
        }
        let listener = Self {
            peer: service.peer().clone(),
            events,
            label: label.to_owned(),
            lists,
            subscribable,
            resources: Mutex::default(),
            task: Mutex::default(),
        };
        listener.listen();
        Some(listener)
    }

    /// Adds or removes a resource whose updates are wanted; `false` when the server
    /// offers no resource subscriptions.
    pub(super) fn resource(&self, uri: &str, wanted: bool) -> bool {
        if !self.subscribable {
            return false;
        }
        let changed = {
            let mut resources = self.resources.lock().expect("resources lock");
            if wanted {
                resources.insert(uri.to_owned())
            } else {
                resources.remove(uri)
            }
        };
        if changed {
            self.listen();
        }
        true
    }

    /// (Re)opens the listening request with the current filter.
    fn listen(&self) {
        let mut filter = self.lists.clone();
        let resources = self.resources.lock().expect("resources lock").clone();
        if !resources.is_empty() {
            filter.resource_subscriptions = Some(resources.into_iter().collect());
        }
        let (peer, events, label) = (self.peer.clone(), self.events.clone(), self.label.clone());
        let task = tokio::spawn(async move {
            let mut subscription = match peer.listen(filter).await {
                Ok(subscription) => subscription,
                Err(error) => {
                    tracing::info!(upstream = %label, %error, "the server's changes cannot be followed: subscriptions/listen failed");
                    return;
                }
            };
            while let Ok(Some(notification)) = subscription.next().await {
                let event = match notification {
                    ServerNotification::ToolListChangedNotification(_) => {
                        UpstreamEvents::ToolsChanged
                    }
                    ServerNotification::PromptListChangedNotification(_) => {
                        UpstreamEvents::PromptsChanged
                    }
                    ServerNotification::ResourceListChangedNotification(_) => {
                        UpstreamEvents::ResourcesChanged
                    }
                    ServerNotification::ResourceUpdatedNotification(update) => {
                        UpstreamEvents::ResourceUpdated(update.params.uri)
                    }
                    _ => continue,
                };
                if events.send(event).is_err() {
                    break;
                }
            }
        });
        if let Some(old) = self
            .task
            .lock()
            .expect("task lock")
            .replace(task.abort_handle())
        {
            // Dropping its subscription cancels the old request upstream.
            old.abort();
        }
    }
}

impl Drop for ChangeListener {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().expect("task lock").take() {
            task.abort();
        }
    }
}
