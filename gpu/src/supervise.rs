//! Child-process supervision: own process group, hard deadline, SIGTERM then SIGKILL, JSON lines.
//! (Skeleton.)
