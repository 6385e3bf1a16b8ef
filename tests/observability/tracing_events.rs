//! With the `tracing` feature, each transition is a structured event.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use tailguard::Breaker;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// One event's fields, as (name, value) text.
type Fields = Vec<(String, String)>;

/// A subscriber that keeps every event's fields as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Fields>>>);

struct Visitor(Fields);

impl Visit for Visitor {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.push((field.name().to_string(), format!("{value:?}")));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut visitor = Visitor(Vec::new());
        event.record(&mut visitor);
        self.0.lock().unwrap().push(visitor.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn each_transition_is_a_structured_event() {
    let capture = Capture::default();
    let events = Arc::clone(&capture.0);
    tracing::subscriber::with_default(capture, || {
        let b = Breaker::builder().name("pricing").ticker(false).build().unwrap();
        b.trip_now();
        b.reset();
    });
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 2);
    let get = |e: &Fields, k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get(&events[0], "consumer").as_deref(), Some("\"pricing\""));
    assert_eq!(get(&events[0], "from").as_deref(), Some("Closed"));
    assert_eq!(get(&events[0], "to").as_deref(), Some("Open"));
    assert_eq!(get(&events[0], "generation").as_deref(), Some("1"));
    assert_eq!(get(&events[0], "reason").as_deref(), Some("ManualTrip"));
    assert_eq!(get(&events[1], "to").as_deref(), Some("Closed"));
    assert_eq!(get(&events[1], "reason").as_deref(), Some("Reset"));
}
