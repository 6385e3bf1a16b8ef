//! Guides, rendered here beside the API they describe: how the crate
//! behaves and how it is built, the operator's runbook with its alert
//! rules, and the figures it was measured at. (In the repository they are
//! `docs/design.md`, `ops/README.md` with `ops/alerts.yml` and
//! `ops/fleet.yml`, and `docs/figures.md`.)

#[doc = include_str!("../docs/design.md")]
pub mod design {}

#[doc = include_str!("../ops/README.md")]
#[doc = "\n## The alert rules (`ops/alerts.yml`)\n\n```yaml"]
#[doc = include_str!("../ops/alerts.yml")]
#[doc = "```"]
#[doc = "\n## The fleet rules (`ops/fleet.yml`)\n\n```yaml"]
#[doc = include_str!("../ops/fleet.yml")]
#[doc = "```"]
pub mod runbook {}

#[doc = include_str!("../docs/figures.md")]
pub mod figures {}
