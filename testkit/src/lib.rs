//! The tests' shared kit: builders of core's types (`ddpcheck_core::testkit`, re-exported here)
//! and the `ddpcheckd` process helpers that the daemon's and the CLI's tests both need. A
//! dev-dependency only: nothing here is in a binary that ships.

pub mod daemon;

pub use ddpcheck_core::testkit::*;
