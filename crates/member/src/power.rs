//! The power of the whole machine, for fault-injecting members that lose their
//! volatile caches together: every [`crate::FaultyMember`] planned with
//! `power-cut-on-signal` is on one rail, and [`cut_machine_power`] undoes the writes
//! each has not flushed at one instant — as a power failure does to every drive at
//! once, which a member-by-member `power-cut-after` cannot show. A crash test cuts the
//! power this way and then ends the process, where `kill -9` would leave everything
//! the process wrote in the page cache.

use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use crate::fault::Cache;

/// I/O of members on the rail holds it shared; a cut holds it alone.
static RAIL: RwLock<()> = RwLock::new(());
static ON_RAIL: Mutex<Vec<Weak<Cache>>> = Mutex::new(Vec::new());

/// Held across one I/O of a member on the rail.
pub(crate) type Powered = RwLockReadGuard<'static, ()>;

pub(crate) fn powered() -> Powered {
    RAIL.read().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn attach(cache: &Arc<Cache>) {
    let mut on = ON_RAIL.lock().unwrap_or_else(|e| e.into_inner());
    on.retain(|c| c.strong_count() > 0);
    on.push(Arc::downgrade(cache));
}

/// The machine without power: while it is held, no member on the rail does I/O.
#[derive(Debug)]
#[must_use = "I/O goes on once this is dropped: hold it until the process ends"]
pub struct PowerOff {
    _rail: RwLockWriteGuard<'static, ()>,
    /// Members whose caches were lost.
    pub members: usize,
}

/// Cuts the machine's power: waits for the I/O under way on members on the rail,
/// undoes each one's writes since its last flush, and stops their I/O for as long as
/// the returned guard is held (until the process ends, as the caller should see to).
pub fn cut_machine_power() -> PowerOff {
    let rail = RAIL.write().unwrap_or_else(|e| e.into_inner());
    let on = ON_RAIL.lock().unwrap_or_else(|e| e.into_inner());
    let caches: Vec<Arc<Cache>> = on.iter().filter_map(Weak::upgrade).collect();
    for cache in &caches {
        cache.cut_power();
    }
    PowerOff {
        _rail: rail,
        members: caches.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FaultPlan, FaultyMember, Member, MemoryMember};

    fn on_rail(name: &str) -> FaultyMember {
        let plan = FaultPlan {
            on_machine_power: true,
            ..FaultPlan::default()
        };
        FaultyMember::new(Box::new(MemoryMember::new(name, 1 << 16)), plan)
    }

    #[test]
    fn one_cut_undoes_what_every_member_on_the_rail_had_not_flushed() {
        let (a, b) = (on_rail("a"), on_rail("b"));
        let off_rail = FaultyMember::new(
            Box::new(MemoryMember::new("c", 1 << 16)),
            FaultPlan::default(),
        );
        a.write_at(&[1; 512], 0).expect("write");
        a.flush().expect("flush");
        a.write_at(&[2; 512], 0).expect("write");
        a.write_at(&[3; 512], 4096).expect("write");
        b.write_durable_at(&[4; 512], 0).expect("durable write");
        b.write_at(&[5; 512], 512).expect("write");
        off_rail.write_at(&[6; 512], 0).expect("write");

        let off = cut_machine_power();
        assert!(off.members >= 2, "both members are on the rail");
        drop(off);
        let read = |m: &FaultyMember, at: u64| {
            let mut buf = [0u8; 512];
            m.cache
                .inner
                .read_at(&mut buf, at)
                .expect("read behind the plan");
            buf[0]
        };
        assert_eq!(read(&a, 0), 1, "flushed, then overwritten without a flush");
        assert_eq!(read(&a, 4096), 0, "never flushed");
        assert_eq!(read(&b, 0), 4, "a durable write stays");
        assert_eq!(read(&b, 512), 0, "never flushed");
        assert_eq!(
            read(&off_rail, 0),
            6,
            "a member off the rail keeps its writes"
        );
        let mut buf = [0u8; 512];
        assert!(a.read_at(&mut buf, 0).is_err(), "the device is gone");
        assert!(b.flush().is_err(), "the device is gone");
        off_rail.flush().expect("a member off the rail goes on");
    }
}
