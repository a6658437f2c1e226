//! Hooks for imagefeed's own tests, behind the `__testing` feature (never on in a dependent's
//! build): a panic injected at one sample, a cache file system that seems full, a device slot
//! ring staged in host memory, and a look at that ring.

use crate::builder::LoaderBuilder;
use crate::loader::Loader;

impl LoaderBuilder {
    /// Testing aid: on the host, run batches through the device slot ring with host memory
    /// standing in for the GPU (see `prefetch/host.rs`).
    pub fn simulate_device_staging(mut self, on: bool) -> Self {
        self.cfg.device.simulate_device = on;
        self
    }

    /// Testing aid: make the decode thread panic on the sample with this dataset index.
    pub fn inject_panic_at_index(mut self, index: u64) -> Self {
        self.cfg.panic_on_index = Some(index);
        self
    }

    /// Testing aid: which samples fail when read from the source, as a function of (epoch,
    /// dataset index): `Some(true)` as undecodable bytes do (a permanent failure, which a
    /// cache records), `Some(false)` as a transient I/O error does (never recorded).
    pub fn inject_failures(
        mut self,
        f: impl Fn(u64, u64) -> Option<bool> + Send + Sync + 'static,
    ) -> Self {
        self.cfg.failures = Some(crate::config::FailureHook(std::sync::Arc::new(f)));
        self
    }

    /// Testing aid: the next `n` commits of the cache fail (as an `fsync` or a rename can).
    pub fn fail_cache_commits(mut self, n: u64) -> Self {
        self.cfg.cache.failing_commits = Some(std::sync::Arc::new(n.into()));
        self
    }

    /// Testing aid: pretend the cache's file system has this many bytes free.
    pub fn simulate_cache_free_space(mut self, bytes: u64) -> Self {
        self.cfg.cache.free_space_override = Some(bytes);
        self
    }
}

impl Loader {
    /// Testing aid: epoch `epoch`'s global order (every position's dataset index), laid out
    /// for `world` ranks where the source is read as streams.
    pub fn global_order(&self, epoch: u64, world: usize) -> Vec<u32> {
        let order = crate::pipeline::global_order(self.config(), self.source(), epoch, world);
        (0..order.len()).map(|q| order.at(q)).collect()
    }

    /// Testing aid: the device slot ring's `(capacity, created, free)` slots (zeros without a
    /// ring).
    pub fn device_slots(&self) -> (usize, usize, usize) {
        let (created, free) = self.staging.slot_use();
        (self.staging.slots(), created, free)
    }
}
