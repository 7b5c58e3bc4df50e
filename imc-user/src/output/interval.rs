//! Output for interval.
