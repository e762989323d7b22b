//! `epp-lab`: compare routing configs on a simulated fleet in virtual time (see the `epp_lab` crate).

use clap::Parser;

fn main() -> anyhow::Result<()> {
    epp_lab::cli::run(epp_lab::cli::LabArgs::parse())
}
