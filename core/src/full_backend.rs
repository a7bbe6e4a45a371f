//! A node backend with every capability: what the engine and the daemon hold and the preflight
//! runs on. Each capability trait lives beside the types it speaks, so the base trait
//! (`crate::backend::NodeBackend`) needs none of them.

use crate::backend::NodeBackend;
use crate::cluster::ClusterMember;
use crate::explain::platform::PlatformReader;
use crate::hostcopy::HostCopier;

/// `NodeBackend` with host copies, the platform's reading and cluster runs; each has a default
/// ("not done by this backend"), so a backend that does none of them states empty impls.
pub trait FullBackend: NodeBackend + HostCopier + PlatformReader + ClusterMember {}

impl<T: NodeBackend + HostCopier + PlatformReader + ClusterMember + ?Sized> FullBackend for T {}
