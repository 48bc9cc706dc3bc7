//! Linux system interfaces: affinity now; topology and memory policy to come. Knows nothing
//! about models.

pub mod affinity;
