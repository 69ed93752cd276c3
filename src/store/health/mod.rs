//! Health checks of what a store holds, run against the config: whether Redis may
//! evict it ([`eviction`]), and queues no route names any more ([`stranded`]).

pub(crate) mod eviction;
pub(crate) mod stranded;
