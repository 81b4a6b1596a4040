//! A minimal slab: stable small integer keys for in-flight state, reused after removal.

#[derive(Debug)]
pub(crate) struct Slab<T> {
    entries: Vec<Option<T>>,
    free: Vec<usize>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    pub(crate) fn insert(&mut self, value: T) -> usize {
        self.len += 1;
        match self.free.pop() {
            Some(key) => {
                self.entries[key] = Some(value);
                key
            }
            None => {
                self.entries.push(Some(value));
                self.entries.len() - 1
            }
        }
    }

    pub(crate) fn remove(&mut self, key: usize) -> T {
        let value = self.entries[key].take().expect("slab key is live");
        self.free.push(key);
        self.len -= 1;
        value
    }

    pub(crate) fn get(&self, key: usize) -> &T {
        self.entries[key].as_ref().expect("slab key is live")
    }

    pub(crate) fn get_mut(&mut self, key: usize) -> &mut T {
        self.entries[key].as_mut().expect("slab key is live")
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The live entries with their keys, to change.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut T)> {
        self.entries
            .iter_mut()
            .enumerate()
            .filter_map(|(k, e)| e.as_mut().map(|v| (k, v)))
    }

    /// The live entries with their keys.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(k, e)| e.as_ref().map(|v| (k, v)))
    }
}
