//! `xraid fail` and `xraid remove`: a member out of an array that is not being served.

use anyhow::Result;
use xraid_array::{fail_member, remove_member};

use crate::cli::MemberArgs;

pub fn fail(args: MemberArgs) -> Result<()> {
    let role = fail_member(std::slice::from_ref(&args.array), &args.member)?;
    println!(
        "{}: marked faulty (role {role}); the array runs degraded until a spare or `xraid add` fills the role",
        args.member.display()
    );
    Ok(())
}

pub fn remove(args: MemberArgs) -> Result<()> {
    remove_member(std::slice::from_ref(&args.array), &args.member)?;
    println!(
        "{}: removed from the array; its md superblock is erased",
        args.member.display()
    );
    Ok(())
}
