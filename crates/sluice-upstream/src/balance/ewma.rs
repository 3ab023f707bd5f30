//! Peak EWMA of latency (Finagle's `PeakEwma`, linkerd's `ewma`): quick to believe that a
//! target got slower, slow to believe that it got faster.

use std::time::Duration;

use tokio::time::Instant;

/// The least an estimate reads, in seconds (1 ms).
///
/// NOTE: without a floor, targets idle for a while decay toward zero at different rates,
/// and a burst after the pause herds onto the one idle longest: e^(−Δt/τ) apart, no
/// in-flight multiplier catches up. At the floor, idle targets cost the same and the
/// in-flight term spreads the burst. We accept that latencies below 1 ms look equal;
/// Finagle instead penalises a zero estimate with requests pending, which still herds
/// between two tiny non-zero estimates.
pub(crate) const FLOOR: f64 = 0.001;

/// One latency estimate, in seconds, and when it was last fed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeakEwma {
    estimate: f64,
    updated: Instant,
    samples: u64,
}

impl PeakEwma {
    pub(crate) fn new(initial: Duration, now: Instant) -> PeakEwma {
        PeakEwma {
            estimate: initial.as_secs_f64(),
            updated: now,
            samples: 0,
        }
    }

    /// Weight the old estimate keeps after `now − updated` (e^(−Δt/τ)).
    fn keep(&self, now: Instant, tau: Duration) -> f64 {
        let dt = now.saturating_duration_since(self.updated).as_secs_f64();
        (-dt / tau.as_secs_f64()).exp()
    }

    /// Feeds one sample. A sample above the estimate replaces it at once (the "peak"); a
    /// lower one is blended in with the weight the time since the last sample earned it.
    /// The first sample replaces the initial guess whatever it is: a guess above the real
    /// latencies would otherwise take a time constant to unlearn, and meanwhile a slow and a
    /// fast target would look the same.
    pub(crate) fn observe(&mut self, sample: Duration, now: Instant, tau: Duration) {
        let sample = sample.as_secs_f64();
        if sample >= self.estimate || self.samples == 0 {
            self.estimate = sample;
        } else {
            let keep = self.keep(now, tau);
            self.estimate = self.estimate * keep + sample * (1.0 - keep);
        }
        // A sample timed before `updated` (reported late) must not move the clock back.
        self.updated = self.updated.max(now);
        self.samples += 1;
    }

    /// The estimate as seen at `now`, in seconds: without new samples it decays toward zero
    /// with the same time constant, so a target that was slow once is tried again after a
    /// while and re-measured instead of starving forever (Finagle reads it the same way),
    /// but never below [`FLOOR`].
    pub(crate) fn read(&self, now: Instant, tau: Duration) -> f64 {
        (self.estimate * self.keep(now, tau)).max(FLOOR)
    }

    pub(crate) fn samples(&self) -> u64 {
        self.samples
    }
}
