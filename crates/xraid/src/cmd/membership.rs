//! `xraid fail` and `xraid remove`: a member out of an array; on an array `xraid serve`
//! serves, the server does it through its control socket.

use anyhow::Result;
use xraid_array::{fail_member, remove_member};

use crate::cli::MemberArgs;

pub fn fail(args: MemberArgs) -> Result<()> {
    let paths = super::named::array_paths(&args.array);
    if let Some(socket) = super::live::served(&paths) {
        let path = std::fs::canonicalize(&args.member).unwrap_or_else(|_| args.member.clone());
        let answer = super::live::ask(
            &socket,
            &serde_json::json!({ "op": "fail", "member": path.display().to_string() }),
        )?;
        if answer["replacement"].as_bool() == Some(true) {
            println!(
                "{}: the replacement being built for role {} is dropped; the member it was to replace serves on",
                args.member.display(),
                answer["role"]
            );
        } else {
            println!(
                "{}: marked faulty (role {}) by the server that serves the array",
                args.member.display(),
                answer["role"]
            );
        }
        return Ok(());
    }
    let role = fail_member(&paths, &args.member)?;
    println!(
        "{}: marked faulty (role {role}); the array runs degraded until a spare or `xraid add` fills the role",
        args.member.display()
    );
    Ok(())
}

pub fn remove(args: MemberArgs) -> Result<()> {
    let paths = super::named::array_paths(&args.array);
    if let Some(socket) = super::live::served(&paths) {
        let path = super::live::absolute(&args.member);
        super::live::ask(
            &socket,
            &serde_json::json!({ "op": "remove", "member": path.display().to_string() }),
        )?;
        println!(
            "{}: removed from the array by the server that serves it; its md superblock is erased",
            args.member.display()
        );
        return Ok(());
    }
    remove_member(&paths, &args.member)?;
    println!(
        "{}: removed from the array; its md superblock is erased",
        args.member.display()
    );
    Ok(())
}
