//! Output for top.
