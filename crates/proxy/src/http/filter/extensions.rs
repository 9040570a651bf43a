//! Facts one filter leaves for later ones, keyed by their type ([`Extensions`]): the verified JSON
//! Web Token of `jwt`, read by a `rate_limit` keyed on a claim; whatever an external filter
//! wants to hand to another. A new kind of fact is a new type, not a new field of the request.

use std::any::{Any, TypeId};
use std::fmt;
use std::rc::Rc;

/// A request's facts by type: at most one value of each type. A few entries at most, so a list
/// looked through, not a map.
#[derive(Default, Clone)]
pub struct Extensions {
    entries: Vec<(TypeId, Rc<dyn Any>)>,
}

impl Extensions {
    /// Leaves `value` for later filters, replacing a value of the same type.
    pub fn insert<T: 'static>(&mut self, value: T) {
        self.insert_shared(Rc::new(value));
    }

    /// [`Extensions::insert`] for a value that is shared already (no copy, no new allocation):
    /// [`Extensions::get`] finds it as a `T`.
    pub fn insert_shared<T: 'static>(&mut self, value: Rc<T>) {
        let id = TypeId::of::<T>();
        let value: Rc<dyn Any> = value;
        match self.entries.iter_mut().find(|(t, _)| *t == id) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((id, value)),
        }
    }

    /// The value of type `T` an earlier filter left, if any.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.entries
            .iter()
            .find(|(t, _)| *t == id)
            .and_then(|(_, v)| v.downcast_ref::<T>())
    }

    /// The value of type `T` as shared (to keep beyond the request).
    pub fn get_shared<T: 'static>(&self) -> Option<Rc<T>> {
        let id = TypeId::of::<T>();
        let (_, value) = self.entries.iter().find(|(t, _)| *t == id)?;
        value.clone().downcast::<T>().ok()
    }

    /// Takes the value of type `T` away.
    pub fn remove<T: 'static>(&mut self) -> Option<Rc<T>> {
        let id = TypeId::of::<T>();
        let at = self.entries.iter().position(|(t, _)| *t == id)?;
        self.entries.swap_remove(at).1.downcast::<T>().ok()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every value (keeping the list's room).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Extensions({} values)", self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Tenant(&'static str);

    #[test]
    fn values_are_found_by_type_and_replaced_by_a_value_of_the_same_type() {
        let mut ext = Extensions::default();
        assert!(ext.get::<Tenant>().is_none());
        ext.insert(Tenant("a"));
        ext.insert(7u32);
        ext.insert(Tenant("b"));
        assert_eq!(ext.get::<Tenant>(), Some(&Tenant("b")));
        assert_eq!(ext.get::<u32>(), Some(&7));
        let shared = Rc::new(String::from("token"));
        ext.insert_shared(shared.clone());
        assert!(Rc::ptr_eq(&ext.get_shared::<String>().unwrap(), &shared));
        assert_eq!(ext.remove::<u32>().as_deref(), Some(&7));
        assert!(ext.get::<u32>().is_none());
        ext.clear();
        assert!(ext.is_empty());
    }
}
