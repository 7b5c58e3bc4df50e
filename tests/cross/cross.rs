//! imc built for the other CPUs it ships to, run under qemu-user (POWER9's nest IMC trees, the
//! Arm and CXL trees), and its arm64 package. One test binary: cargo runs test binaries one
//! after another, and as the suite's last step these tests share both CPUs instead.
mod arm64_package;
mod cross_arm;
mod cross_power;
