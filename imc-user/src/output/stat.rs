//! Output for stat.
