//! The Redis-protocol command parser (`vx_proto::resp`): any bytes get an answer and never a
//! panic; every range it returns lies inside the command it claims; a claimed command is the
//! same however much of the input followed it; and re-encoding the commands it found and
//! parsing them again finds the same commands.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vx_proto::resp::{Limits, Parsed, encode_command, parse_command};

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_args: 64,
        max_bulk: 512,
        max_inline: 512,
    };
    let mut rest = data;
    let mut found: Vec<Vec<Vec<u8>>> = Vec::new();
    while let Ok(Parsed::Command { args, len }) = parse_command(rest, &limits) {
        assert!(len > 0 && len <= rest.len());
        assert!(args.len() <= limits.max_args);
        for r in &args {
            assert!(r.start <= r.end && r.end <= len);
        }
        // The same command from exactly its own bytes.
        assert_eq!(
            parse_command(&rest[..len], &limits),
            Ok(Parsed::Command {
                args: args.clone(),
                len
            })
        );
        found.push(args.iter().map(|r| rest[r.clone()].to_vec()).collect());
        rest = &rest[len..];
    }
    if let Ok(Parsed::Need(n)) = parse_command(rest, &limits) {
        assert!(n > rest.len());
    }
    let mut wire = Vec::new();
    for c in found.iter().filter(|c| !c.is_empty()) {
        let a: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
        encode_command(&a, &mut wire);
    }
    let mut again = Vec::new();
    let mut w = &wire[..];
    while let Ok(Parsed::Command { args, len }) = parse_command(w, &limits) {
        again.push(args.iter().map(|r| w[r.clone()].to_vec()).collect::<Vec<_>>());
        w = &w[len..];
    }
    assert!(w.is_empty());
    let nonempty: Vec<_> = found.into_iter().filter(|c| !c.is_empty()).collect();
    assert_eq!(again, nonempty);
});
