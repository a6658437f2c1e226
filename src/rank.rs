//! Sharding: this rank's settings (rank, world size, padding; the plan in
//! `pipeline/plan.rs` splits each epoch by them), and which rank this process is, from the
//! environment its launcher set: torchrun, Slurm's `srun`, Open MPI's `mpirun`, or MPICH /
//! Intel MPI (PMI).
//!
//! A pure core ([`Launch::from_vars`], which takes a lookup function, so that tests need not
//! touch the process's environment) and [`Launch::from_env`] over `std::env::var`.

use std::fmt;

use crate::error::Error;

/// How a sharded loader makes every rank's share the same size when the source does not
/// divide evenly by the world size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ShardPadding {
    /// Ranks take disjoint samples whose union is the whole source (`floor` or `ceil` of
    /// `n / world_size` each); only when that would give ranks different batch counts does a
    /// short rank repeat one sample from the start of the epoch's permutation. The default.
    #[default]
    EqualBatches,
    /// Repeat samples from the start of the epoch's permutation so that every rank gets
    /// `ceil(n / world_size)` samples (PyTorch's `DistributedSampler` default).
    Repeat,
    /// Drop the tail so that every rank gets `floor(n / world_size)` samples.
    Drop,
}

/// The shard stage's settings (default: rank 0 of 1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShardSettings {
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) padding: ShardPadding,
}

impl Default for ShardSettings {
    fn default() -> Self {
        ShardSettings {
            rank: 0,
            world_size: 1,
            padding: ShardPadding::EqualBatches,
        }
    }
}

impl ShardSettings {
    /// Checks the settings for a source of `len` samples.
    pub(crate) fn validate(&self, len: usize) -> Result<(), Error> {
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err(Error::config(
                "shard",
                format!(
                    "rank {} of world size {}: need world_size >= 1 and rank < world_size",
                    self.rank, self.world_size
                ),
            ));
        }
        if self.world_size > 1 && self.padding == ShardPadding::Drop && len < self.world_size {
            return Err(Error::config(
                "shard",
                format!(
                    "{len} samples cannot give each of {} ranks one with ShardPadding::Drop",
                    self.world_size
                ),
            ));
        }
        Ok(())
    }
}

/// The launcher whose variables gave a process its rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Launcher {
    /// torchrun (or any launcher that sets `RANK` and `WORLD_SIZE`, as torch.distributed's
    /// `env://` initialization reads them): `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
    /// `LOCAL_WORLD_SIZE`.
    Torchrun,
    /// Slurm's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`.
    Slurm,
    /// Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
    /// `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`.
    OpenMpi,
    /// MPICH, Intel MPI and other PMI launchers: `PMI_RANK`, `PMI_SIZE` (and Hydra's
    /// `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`).
    Pmi,
    /// None of them: a single process, rank 0 of 1.
    None,
}

impl Launcher {
    /// The variables that name this launcher's rank and world size.
    fn vars(self) -> (&'static str, &'static str) {
        match self {
            Launcher::Torchrun => ("RANK", "WORLD_SIZE"),
            Launcher::Slurm => ("SLURM_PROCID", "SLURM_NTASKS"),
            Launcher::OpenMpi => ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
            Launcher::Pmi => ("PMI_RANK", "PMI_SIZE"),
            Launcher::None => ("", ""),
        }
    }

    /// The variables of the local rank and the processes on this node.
    fn local_vars(self) -> (&'static str, &'static str) {
        match self {
            Launcher::Torchrun => ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
            Launcher::Slurm => ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
            Launcher::OpenMpi => ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
            Launcher::Pmi => ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
            Launcher::None => ("", ""),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "Slurm",
            Launcher::OpenMpi => "Open MPI",
            Launcher::Pmi => "PMI (MPICH, Intel MPI)",
            Launcher::None => "no launcher",
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// This process's place in a multi-process job, as its launcher set it in the environment:
/// the global rank and world size that [`LoaderBuilder::shard`](crate::LoaderBuilder::shard)
/// takes, and the local rank that picks the process's GPU.
///
/// ```
/// # fn main() -> Result<(), imagefeed::Error> {
/// use imagefeed::{Device, Launch, Loader, Source};
///
/// let launch = Launch::from_env()?; // rank 0 of 1 outside a launcher
/// let device = match launch.local_rank {
///     Some(local) => Device::Cuda(local), // torchrun, srun and mpirun give one
///     None => Device::Host,
/// };
/// # let device = Device::Host;
/// let loader = Loader::builder(Source::from_dir("testdata/classes")?)
///     .shard(launch.rank, launch.world_size)
///     .device(device)
///     .build()?;
/// println!("{launch}"); // for example "rank 3 of 8 (local rank 3) from torchrun (RANK, WORLD_SIZE)"
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Launch {
    /// The global rank.
    pub rank: usize,
    /// The number of processes in the job.
    pub world_size: usize,
    /// The rank among the processes on this node (`None`: the launcher does not say).
    pub local_rank: Option<usize>,
    /// The number of processes on this node (`None`: the launcher does not say).
    pub local_world_size: Option<usize>,
    /// Whose variables these are.
    pub launcher: Launcher,
}

impl Launch {
    /// Reads the environment (see [`Launch::from_vars`]).
    ///
    /// # Errors
    /// As [`Launch::from_vars`].
    pub fn from_env() -> Result<Launch, Error> {
        Launch::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads the launchers' variables through `var` (a name to its value, `None` if unset).
    ///
    /// The launchers are read in this order, and the first one present gives the rank:
    /// 1. torchrun: `RANK`, `WORLD_SIZE` (`LOCAL_RANK`, `LOCAL_WORLD_SIZE`);
    /// 2. Open MPI: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`
    ///    (`OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`);
    /// 3. PMI (MPICH, Intel MPI): `PMI_RANK`, `PMI_SIZE` (`MPI_LOCALRANKID`, `MPI_LOCALNRANKS`);
    /// 4. Slurm: `SLURM_PROCID`, `SLURM_NTASKS` (`SLURM_LOCALID`).
    ///
    /// Without any, rank 0 of 1. Slurm comes last because the others run inside Slurm jobs:
    /// under `srun torchrun …` or `mpirun` in a batch script, Slurm's variables count the
    /// launchers' tasks (often one a node), not the training processes. Any two of torchrun,
    /// Open MPI and PMI that are both set must agree, and so must Slurm's with a `RANK` and
    /// `WORLD_SIZE` that torchrun did not set (it sets `TORCHELASTIC_RUN_ID` and `GROUP_RANK`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) naming the variables: a
    /// rank without its world size (or the reverse), a value that is not a number, a rank not
    /// below its world size, or two launchers' variables that disagree.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Launch, Error> {
        let mut found: Vec<Launch> = Vec::new();
        for launcher in [
            Launcher::Torchrun,
            Launcher::OpenMpi,
            Launcher::Pmi,
            Launcher::Slurm,
        ] {
            if let Some(l) = read_set(&var, launcher)? {
                found.push(l);
            }
        }
        let torchrun_itself = var("TORCHELASTIC_RUN_ID").is_some() || var("GROUP_RANK").is_some();
        for (k, a) in found.iter().enumerate() {
            for b in &found[k + 1..] {
                let nested = b.launcher == Launcher::Slurm
                    && (a.launcher != Launcher::Torchrun || torchrun_itself);
                if !nested && (a.rank, a.world_size) != (b.rank, b.world_size) {
                    return Err(Error::config(
                        "Launch::from_env",
                        format!(
                            "the launchers' variables disagree: {} says rank {} of {} ({}), {} says rank {} of {} ({}); unset the stale ones, or give the rank with shard(rank, world_size)",
                            a.launcher,
                            a.rank,
                            a.world_size,
                            a.vars_text(&var),
                            b.launcher,
                            b.rank,
                            b.world_size,
                            b.vars_text(&var)
                        ),
                    ));
                }
            }
        }
        Ok(found.into_iter().next().unwrap_or(Launch {
            rank: 0,
            world_size: 1,
            local_rank: None,
            local_world_size: None,
            launcher: Launcher::None,
        }))
    }

    /// `NAME=value` of the variables that gave the rank and world size.
    fn vars_text(&self, var: &impl Fn(&str) -> Option<String>) -> String {
        let (r, w) = self.launcher.vars();
        let w = if self.launcher == Launcher::Slurm && var(w).is_none() {
            "SLURM_NPROCS"
        } else {
            w
        };
        format!(
            "{r}={}, {w}={}",
            var(r).unwrap_or_default(),
            var(w).unwrap_or_default()
        )
    }

    /// The GPU of this process's local rank, `Device::Cuda(local_rank)`, or
    /// `Device::Cuda(0)` when the launcher does not say (one process on the node).
    pub fn cuda_device(&self) -> crate::Device {
        crate::Device::Cuda(self.local_rank.unwrap_or(0))
    }
}

impl fmt::Display for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} of {}", self.rank, self.world_size)?;
        if let Some(local) = self.local_rank {
            write!(f, " (local rank {local})")?;
        }
        match self.launcher {
            Launcher::None => write!(f, ": no launcher's variables are set"),
            l => {
                let (r, w) = l.vars();
                write!(f, " from {l} ({r}, {w})")
            }
        }
    }
}

/// One launcher's variables, if its rank or world size is set.
fn read_set(
    var: &impl Fn(&str) -> Option<String>,
    launcher: Launcher,
) -> Result<Option<Launch>, Error> {
    let (rank_var, size_var) = launcher.vars();
    let number = |name: &str| -> Result<Option<usize>, Error> {
        match var(name) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                Error::config(
                    "Launch::from_env",
                    format!("{name}=`{v}` is not a number ({launcher})"),
                )
            }),
        }
    };
    let mut size = number(size_var)?;
    if launcher == Launcher::Slurm && size.is_none() {
        // Older Slurm, and some job steps, set only the older name.
        size = number("SLURM_NPROCS")?;
    }
    let (rank, world_size) = match (number(rank_var)?, size) {
        (None, None) => return Ok(None),
        (Some(r), Some(w)) => (r, w),
        (Some(_), None) => {
            return Err(Error::config(
                "Launch::from_env",
                format!("{rank_var} is set but {size_var} is not ({launcher}): set both"),
            ))
        }
        (None, Some(_)) => {
            return Err(Error::config(
                "Launch::from_env",
                format!("{size_var} is set but {rank_var} is not ({launcher}): set both"),
            ))
        }
    };
    if world_size == 0 || rank >= world_size {
        return Err(Error::config(
            "Launch::from_env",
            format!(
                "{rank_var}={rank} with {size_var}={world_size} ({launcher}): the rank must be below the world size"
            ),
        ));
    }
    let (local_var, local_size_var) = launcher.local_vars();
    // Slurm's tasks a node may read `2(x3)` (two on each of three nodes): a plain number only.
    let local_world_size = var(local_size_var).and_then(|v| v.trim().parse().ok());
    Ok(Some(Launch {
        rank,
        world_size,
        local_rank: number(local_var)?,
        local_world_size,
        launcher,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(vars: &[(&str, &str)]) -> Result<Launch, Error> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Launch::from_vars(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn each_launcher_gives_rank_world_size_and_local_rank() {
        let cases: [(&[(&str, &str)], Launcher); 4] = [
            (
                &[
                    ("RANK", "1"),
                    ("WORLD_SIZE", "2"),
                    ("LOCAL_RANK", "1"),
                    ("LOCAL_WORLD_SIZE", "2"),
                ],
                Launcher::Torchrun,
            ),
            (
                &[
                    ("SLURM_PROCID", "1"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_LOCALID", "1"),
                ],
                Launcher::Slurm,
            ),
            (
                &[
                    ("OMPI_COMM_WORLD_RANK", "1"),
                    ("OMPI_COMM_WORLD_SIZE", "2"),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                ],
                Launcher::OpenMpi,
            ),
            (
                &[
                    ("PMI_RANK", "1"),
                    ("PMI_SIZE", "2"),
                    ("MPI_LOCALRANKID", "1"),
                ],
                Launcher::Pmi,
            ),
        ];
        for (vars, launcher) in cases {
            let l = launch(vars).unwrap();
            assert_eq!(
                (l.rank, l.world_size, l.local_rank, l.launcher),
                (1, 2, Some(1), launcher),
                "{vars:?}"
            );
            assert_eq!(l.cuda_device(), crate::Device::Cuda(1));
            assert!(l.to_string().contains(launcher.vars().0), "{l}");
        }
    }

    #[test]
    fn no_launcher_is_rank_0_of_1() {
        let l = launch(&[]).unwrap();
        assert_eq!((l.rank, l.world_size, l.launcher), (0, 1, Launcher::None));
        assert_eq!(l.local_rank, None);
    }

    #[test]
    fn launchers_that_disagree_are_an_error_naming_both() {
        let err = launch(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("RANK=0") && err.contains("OMPI_COMM_WORLD_RANK=1"),
            "{err}"
        );
        // A bare RANK (not torchrun's) against srun's.
        let err = launch(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("WORLD_SIZE=1") && err.contains("SLURM_NTASKS=4"),
            "{err}"
        );
        // Agreeing sets are fine.
        let l = launch(&[
            ("PMI_RANK", "2"),
            ("PMI_SIZE", "4"),
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
        ])
        .unwrap();
        assert_eq!((l.rank, l.launcher), (2, Launcher::Pmi));
    }

    #[test]
    fn launchers_inside_a_slurm_job_win_over_its_task_variables() {
        // `srun --ntasks-per-node=1 torchrun --nproc-per-node=4`: Slurm counts nodes.
        let l = launch(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("GROUP_RANK", "1"),
            ("TORCHELASTIC_RUN_ID", "job"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
        ])
        .unwrap();
        assert_eq!(
            (l.rank, l.world_size, l.local_rank, l.launcher),
            (5, 8, Some(1), Launcher::Torchrun)
        );
        // `mpirun` inside a batch script: the batch step is task 0.
        let l = launch(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
        ])
        .unwrap();
        assert_eq!((l.rank, l.launcher), (3, Launcher::OpenMpi));
    }

    #[test]
    fn half_sets_bad_numbers_and_ranks_past_the_world_are_errors_naming_the_variable() {
        for (vars, says) in [
            (&[("RANK", "1")][..], "WORLD_SIZE is not"),
            (&[("PMI_SIZE", "2")][..], "PMI_RANK is not"),
            (
                &[("SLURM_PROCID", "x"), ("SLURM_NTASKS", "2")][..],
                "SLURM_PROCID=`x`",
            ),
            (
                &[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "2")][..],
                "below the world size",
            ),
        ] {
            let err = launch(vars).unwrap_err().to_string();
            assert!(err.contains(says), "{vars:?}: {err}");
        }
        // SLURM_NPROCS stands in for SLURM_NTASKS.
        let l = launch(&[("SLURM_PROCID", "1"), ("SLURM_NPROCS", "3")]).unwrap();
        assert_eq!((l.rank, l.world_size), (1, 3));
    }
}
