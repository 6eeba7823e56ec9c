//! Per-user rate limits on tool calls and chat turns: what one tenant can make the
//! service (and its upstreams and model providers) do per minute.
//!
//! GCRA via `governor`, keyed by user, per instance: behind a load balancer that routes
//! by user (deploy/), a user's limit is enforced where their requests land.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::config::LimitSettings;
use crate::domain::UserId;
use crate::error::{Error, Result};

/// Forget users idle past their window every this many checks, so the key map stays small.
const SWEEP_EVERY: u64 = 4096;

struct Limit {
    what: &'static str,
    per_minute: u32,
    limiter: DefaultKeyedRateLimiter<UserId>,
    checks: AtomicU64,
}

impl Limit {
    /// `None` when the setting is 0 (no limit).
    fn new(what: &'static str, per_minute: u32) -> Option<Self> {
        let quota = Quota::per_minute(NonZeroU32::new(per_minute)?);
        Some(Self {
            what,
            per_minute,
            limiter: RateLimiter::keyed(quota),
            checks: AtomicU64::new(0),
        })
    }

    fn check(&self, user: &UserId) -> Result<()> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.limiter.retain_recent();
        }
        self.limiter
            .check_key(user)
            .map_err(|not_until| Error::RateLimited {
                what: self.what,
                per_minute: self.per_minute,
                retry_after: not_until.wait_time_from(DefaultClock::default().now()),
            })
    }
}

pub struct RateLimits {
    tool_calls: Option<Limit>,
    chats: Option<Limit>,
}

impl RateLimits {
    pub fn new(limits: &LimitSettings) -> Self {
        Self {
            tool_calls: Limit::new("tool calls", limits.tool_calls_per_minute),
            chats: Limit::new("chat turns", limits.chats_per_minute),
        }
    }

    pub fn tool_call(&self, user: &UserId) -> Result<()> {
        self.tool_calls.as_ref().map_or(Ok(()), |l| l.check(user))
    }

    pub fn chat_turn(&self, user: &UserId) -> Result<()> {
        self.chats.as_ref().map_or(Ok(()), |l| l.check(user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(calls: u32, chats: u32) -> LimitSettings {
        let mut limits = crate::config::Settings::defaults().limits;
        limits.tool_calls_per_minute = calls;
        limits.chats_per_minute = chats;
        limits
    }

    #[test]
    fn a_user_over_the_limit_is_told_when_to_retry_and_others_are_unaffected() {
        let limits = RateLimits::new(&limits(3, 0));
        let (alice, bob) = (
            UserId::parse("alice").unwrap(),
            UserId::parse("bob").unwrap(),
        );
        for _ in 0..3 {
            limits.tool_call(&alice).expect("within the burst");
        }
        match limits.tool_call(&alice) {
            Err(Error::RateLimited { retry_after, .. }) => {
                // One call's worth of a 3-per-minute quota: about 20 s.
                assert!(retry_after.as_secs() <= 20 && retry_after.as_secs() >= 19);
            }
            other => panic!("expected RATE_LIMITED, got {other:?}"),
        }
        limits
            .tool_call(&bob)
            .expect("another user has their own budget");
        for _ in 0..100 {
            limits.chat_turn(&alice).expect("0 means no limit");
        }
    }
}
