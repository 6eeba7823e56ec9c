//! The last 15 minutes of tool calls, in 10-second slots, for the console's charts: calls,
//! errors by code and a latency histogram per slot (p50/p99 from it). Prometheus keeps
//! totals since start; an operator asking "how is it now" needs a window, and this one
//! costs one short lock per call and ~50 KiB per instance.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// Seconds per slot.
pub const SLOT_SECS: i64 = 10;
/// Slots kept: 15 minutes.
pub(crate) const SLOTS: usize = 90;
/// Latency buckets: bucket `i` holds latencies below `FIRST_BOUND_US · GROWTH^(i+1)`.
const BUCKETS: usize = 64;
const FIRST_BOUND_US: f64 = 16.0;
/// 2^(1/3): ~26 % apart, 64 buckets reach past 30 s.
const GROWTH: f64 = 1.259_921_049_894_873_2;

struct Slot {
    start: i64,
    calls: u64,
    errors: BTreeMap<&'static str, u64>,
    latency: [u32; BUCKETS],
}

impl Slot {
    fn new(start: i64) -> Self {
        Self {
            start,
            calls: 0,
            errors: BTreeMap::new(),
            latency: [0; BUCKETS],
        }
    }

    /// The latency (ms) below which `quantile` of the slot's calls fell: the upper bound
    /// of the bucket that reaches it.
    fn quantile_ms(&self, quantile: f64) -> Option<f64> {
        if self.calls == 0 {
            return None;
        }
        let wanted = (self.calls as f64 * quantile).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (index, count) in self.latency.iter().enumerate() {
            seen += u64::from(*count);
            if seen >= wanted {
                return Some(bucket_bound_us(index) / 1000.0);
            }
        }
        Some(bucket_bound_us(BUCKETS - 1) / 1000.0)
    }
}

fn bucket_bound_us(index: usize) -> f64 {
    FIRST_BOUND_US * GROWTH.powi(index as i32 + 1)
}

fn bucket_of(took: Duration) -> usize {
    let micros = took.as_secs_f64() * 1e6;
    if micros < FIRST_BOUND_US {
        return 0;
    }
    let index = ((micros / FIRST_BOUND_US).ln() / GROWTH.ln()).floor() as usize;
    index.min(BUCKETS - 1)
}

/// One slot as the console draws it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentSlot {
    /// Unix seconds at the slot's start.
    pub start: i64,
    pub calls: u64,
    /// Error codes (`tool_error` for a tool that answered isError) and their counts.
    pub errors: Vec<(&'static str, u64)>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

#[derive(Default)]
pub struct RecentCalls {
    slots: Mutex<VecDeque<Slot>>,
}

impl RecentCalls {
    pub fn record(&self, outcome: &'static str, took: Duration) {
        self.record_at(chrono::Utc::now().timestamp(), outcome, took);
    }

    fn record_at(&self, now: i64, outcome: &'static str, took: Duration) {
        let start = now - now.rem_euclid(SLOT_SECS);
        let mut slots = self.slots.lock().expect("recent calls lock");
        // Slots stay in time order even when a call that ended just before a slot
        // boundary is recorded after one that ended just past it.
        let index = match slots.iter().rposition(|slot| slot.start <= start) {
            Some(i) if slots[i].start == start => i,
            Some(i) => {
                slots.insert(i + 1, Slot::new(start));
                i + 1
            }
            None => {
                slots.push_front(Slot::new(start));
                0
            }
        };
        let slot = &mut slots[index];
        slot.calls += 1;
        slot.latency[bucket_of(took)] += 1;
        if outcome != "ok" {
            *slot.errors.entry(outcome).or_default() += 1;
        }
        while slots.len() > SLOTS {
            slots.pop_front();
        }
    }

    /// Every slot of the last 15 minutes up to now, oldest first, empty ones included.
    pub fn window(&self) -> Vec<RecentSlot> {
        self.window_at(chrono::Utc::now().timestamp())
    }

    fn window_at(&self, now: i64) -> Vec<RecentSlot> {
        let last = now - now.rem_euclid(SLOT_SECS);
        let first = last - SLOT_SECS * (SLOTS as i64 - 1);
        let slots = self.slots.lock().expect("recent calls lock");
        let mut kept = slots.iter().filter(|s| s.start >= first).peekable();
        let mut window = Vec::with_capacity(SLOTS);
        let mut start = first;
        while start <= last {
            let slot = kept.next_if(|s| s.start == start);
            window.push(match slot {
                Some(slot) => RecentSlot {
                    start,
                    calls: slot.calls,
                    errors: slot.errors.iter().map(|(k, v)| (*k, *v)).collect(),
                    p50_ms: slot.quantile_ms(0.5),
                    p99_ms: slot.quantile_ms(0.99),
                },
                None => RecentSlot {
                    start,
                    calls: 0,
                    errors: Vec::new(),
                    p50_ms: None,
                    p99_ms: None,
                },
            });
            start += SLOT_SECS;
        }
        window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_their_slot_with_errors_and_quantiles() {
        let recent = RecentCalls::default();
        let now = 1_000_000;
        for _ in 0..98 {
            recent.record_at(now, "ok", Duration::from_millis(2));
        }
        recent.record_at(now, "MCP_TIMEOUT", Duration::from_secs(5));
        recent.record_at(now, "tool_error", Duration::from_millis(2));
        // Recorded after newer calls (a call that ended earlier but finished recording
        // later): it still lands in its own, older slot.
        recent.record_at(now - 60, "ok", Duration::from_millis(1));
        let window = recent.window_at(now);
        assert_eq!(window.len(), SLOTS);
        let last = window.last().unwrap();
        assert_eq!(last.calls, 100);
        assert_eq!(last.errors, vec![("MCP_TIMEOUT", 1), ("tool_error", 1)]);
        let p50 = last.p50_ms.unwrap();
        assert!((2.0..2.6).contains(&p50), "p50 {p50}");
        let p99 = last.p99_ms.unwrap();
        assert!((2.0..2.6).contains(&p99), "p99 {p99}: 99 of 100 took 2 ms");
        assert!(window.iter().filter(|s| s.calls > 0).count() == 2);
        // The older call is in the slot a minute back; nothing in between.
        assert_eq!(window[SLOTS - 7].calls, 1);
    }

    #[test]
    fn slots_older_than_the_window_are_dropped() {
        let recent = RecentCalls::default();
        recent.record_at(0, "ok", Duration::from_millis(1));
        let later = SLOT_SECS * (SLOTS as i64 + 5);
        recent.record_at(later, "ok", Duration::from_millis(1));
        let window = recent.window_at(later);
        assert_eq!(window.iter().map(|s| s.calls).sum::<u64>(), 1);
    }
}
