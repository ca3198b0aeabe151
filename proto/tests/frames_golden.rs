//! Golden byte fixtures of the frames protocol (docs/PROTOCOL.md): the bytes are written out by
//! hand from the document, so a change to the encoding that the document does not describe
//! fails here. Each fixture is checked both ways: encoding gives exactly these bytes, and
//! decoding them gives the value back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use vx_proto::frames::{
    Ack, BatchDecoder, BatchHead, Durability, ErrorFrame, Frame, HEAD_LEN, Hello, MAGIC, Progress,
    Welcome, WireEvent, encode_batch, encode_event_frame, parse_frame,
};
use vx_proto::{Batch, EventView, Kind, Num};

fn encoded(f: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    f.encode(&mut out).unwrap();
    out
}

fn check_control(f: Frame, golden: &[u8]) {
    assert_eq!(encoded(&f), golden, "encoding of {f:?}");
    let (back, used) = parse_frame(golden, u32::MAX).unwrap().unwrap();
    assert_eq!((back, used), (f, golden.len()));
}

#[test]
fn handshake() {
    assert_eq!(MAGIC, [0x56, 0x58, 0x46, 0x52], "\"VXFR\"");
    #[rustfmt::skip]
    let hello: &[u8] = &[
        0x09, 0x00, 0x00, 0x00, // body length 9
        0x01,                   // HELLO
        0x01, 0x00,             // min version 1
        0x01, 0x00,             // max version 1
        0x03, 0x00,             // token length 3
        b't', b'o', b'k',
    ];
    check_control(
        Frame::Hello(Hello {
            min_version: 1,
            max_version: 1,
            token: Some("tok".into()),
        }),
        hello,
    );
    #[rustfmt::skip]
    let welcome: &[u8] = &[
        0x08, 0x00, 0x00, 0x00, // body length 8
        0x02,                   // WELCOME
        0x01, 0x00,             // version 1
        0x00, 0x00, 0x00, 0x04, // max frame 64 MiB
        0x40, 0x00,             // window 64
    ];
    check_control(
        Frame::Welcome(Welcome {
            version: 1,
            max_frame: 64 << 20,
            window: 64,
        }),
        welcome,
    );
}

#[test]
fn batch_with_one_event() {
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0x32, 0x00, 0x00, 0x00,                         // body length 50
        0x03,                                           // BATCH
        0x01, 0, 0, 0, 0, 0, 0, 0,                      // request id 1
        0x03,                                           // durability fsync
        0x00,                                           // flags: no expected last seq
        // the event
        0x01,                                           // kind counter
        0x3d,                                           // ts | entity | data | id | value
        0x7b, 0xa8, 0x3e, 0x43, 0x93, 0x01, 0x00, 0x00, // ts 1732000000123
        0x0c, 0, 0, 0, 0, 0, 0, 0,                      // value 12 (i64)
        0x01, 0x00, b's',                               // stream
        0x01, b't',                                     // type
        0x02, 0x00, b'p', b'7',                         // entity
        0x01, b'a',                                     // id
        0x07, 0x00, 0x00, 0x00, b'{', b'"', b'w', b'"', b':', b'1', b'}', // data
    ];
    let event = WireEvent {
        stream: "s",
        entity: Some("p7"),
        ty: "t",
        ts: Some(1_732_000_000_123),
        kind: Kind::Counter,
        value: Some(Num::Int(12)),
        id: Some("a"),
        data: Some("{\"w\":1}"),
    };
    let head = BatchHead {
        request_id: 1,
        durability: Some(Durability::Fsync),
        expected_last_seq: None,
    };
    let mut out = Vec::new();
    encode_batch(&mut out, &head, &[event]).unwrap();
    assert_eq!(out, golden);

    let body = &golden[HEAD_LEN..];
    let mut d = BatchDecoder::new(body.len() as u32, 1 << 20, 0);
    let mut batch = Batch::new();
    assert_eq!(d.decode(body, &mut batch), (body.len(), Ok(Progress::Done)));
    assert_eq!(d.head(), Some(&head));
    let got: Vec<EventView<'_>> = batch.iter().collect();
    assert_eq!(
        got,
        [EventView {
            stream: "s",
            entity: Some("p7"),
            ty: "t",
            ts: 1_732_000_000_123,
            kind: Kind::Counter,
            value: Some(Num::Int(12)),
            id: Some("a"),
            data: Some("{\"w\":1}"),
        }]
    );
}

#[test]
fn ack() {
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0x2a, 0x00, 0x00, 0x00,    // body length 42
        0x04,                      // ACK
        0x01, 0, 0, 0, 0, 0, 0, 0, // request id 1
        0x01, 0, 0, 0, 0, 0, 0, 0, // accepted 1
        0x00, 0, 0, 0, 0, 0, 0, 0, // duplicates 0
        0x03,                      // durability fsync
        0xc4, 0x09,                // queue fill 2500 basis points (0.25)
        0x01, 0x00, 0x00, 0x00,    // one stream
        0x01, 0x00, b's',          // "s"
        0x01, 0, 0, 0, 0, 0, 0, 0, // last seq 1
    ];
    check_control(
        Frame::Ack(Ack {
            request_id: 1,
            accepted: 1,
            duplicates: 0,
            durability: Durability::Fsync,
            queue_fill: 2500,
            last_seq: vec![("s".into(), 1)],
            position: None,
        }),
        golden,
    );
}

/// Cluster mode's ACK: durability `applied` (5), and the position after the streams.
#[test]
fn ack_with_position() {
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0x32, 0x00, 0x00, 0x00,    // body length 50
        0x04,                      // ACK
        0x01, 0, 0, 0, 0, 0, 0, 0, // request id 1
        0x01, 0, 0, 0, 0, 0, 0, 0, // accepted 1
        0x00, 0, 0, 0, 0, 0, 0, 0, // duplicates 0
        0x05,                      // durability applied
        0x00, 0x00,                // queue fill 0
        0x01, 0x00, 0x00, 0x00,    // one stream
        0x01, 0x00, b's',          // "s"
        0x01, 0, 0, 0, 0, 0, 0, 0, // last seq 1
        0x06, 0x00, b'1', b':', b'0', b'@', b'4', b'2', // position "1:0@42"
    ];
    check_control(
        Frame::Ack(Ack {
            request_id: 1,
            accepted: 1,
            duplicates: 0,
            durability: Durability::Applied,
            queue_fill: 0,
            last_seq: vec![("s".into(), 1)],
            position: Some("1:0@42".into()),
        }),
        golden,
    );
}

#[test]
fn error() {
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0x2c, 0x00, 0x00, 0x00,    // body length 44
        0x05,                      // ERROR
        0x02, 0, 0, 0, 0, 0, 0, 0, // request id 2
        0x0d, b'i', b'n', b'v', b'a', b'l', b'i', b'd', b'_', b'e', b'v', b'e', b'n', b't',
        0x03, 0x00, b'b', b'a', b'd', // message
        0x03,                      // details: index, field
        0x00, 0, 0, 0, 0, 0, 0, 0, // index 0
        0x06, 0x00, b's', b't', b'r', b'e', b'a', b'm', // field
    ];
    let mut e = ErrorFrame::new(2, "invalid_event", "bad");
    e.index = Some(0);
    e.field = Some("stream".into());
    check_control(Frame::Error(e), golden);
}

#[test]
fn ping_pong_and_replay_event() {
    check_control(Frame::Ping(5), &[8, 0, 0, 0, 0x06, 5, 0, 0, 0, 0, 0, 0, 0]);
    check_control(Frame::Pong(5), &[8, 0, 0, 0, 0x07, 5, 0, 0, 0, 0, 0, 0, 0]);
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0x1f, 0x00, 0x00, 0x00,    // body length 31
        0x10,                      // EVENT
        0x07, 0, 0, 0, 0, 0, 0, 0, // seq 7
        0x00,                      // kind event
        0x23,                      // ts | value | value is f64
        0x01, 0, 0, 0, 0, 0, 0, 0, // ts 1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f, // value 1.5
        0x01, 0x00, b's',
        0x01, b't',
    ];
    let ev = EventView {
        stream: "s",
        entity: None,
        ty: "t",
        ts: 1,
        kind: Kind::Event,
        value: Some(Num::Float(1.5)),
        id: None,
        data: None,
    };
    let mut out = Vec::new();
    encode_event_frame(&mut out, &ev, 7).unwrap();
    assert_eq!(out, golden);
}
