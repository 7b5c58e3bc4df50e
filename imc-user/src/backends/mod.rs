//! See lib.rs for this module's responsibility.
