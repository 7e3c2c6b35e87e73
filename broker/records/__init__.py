"""Record formats: RecordBatch v2 as bytes, record encoding, compression codecs."""
