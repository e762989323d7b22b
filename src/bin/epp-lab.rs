//! `epp-lab`: compare routing configs on a simulated fleet in virtual time (see `epp::lab`).

use clap::Parser;

fn main() -> anyhow::Result<()> {
    epp::lab::cli::run(epp::lab::cli::LabArgs::parse())
}
