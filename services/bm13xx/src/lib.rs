//! BM13xx-class ASIC chain protocol (pure codec, no I/O). Being written: see issue 3.
