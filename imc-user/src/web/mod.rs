//! The HTTP side of `imc serve`: the web configuration file in the format of Prometheus'
//! exporter-toolkit (`--web.config.file`: TLS and basic-auth users), and the server that
//! answers on the listening socket with bounded connections and time limits.
pub mod auth;
pub mod config;
pub mod server;
