#!/usr/bin/env node
// Reads TFRecord files with @roboflow/tfrecords, a TFRecord reader nobody in
// this project wrote, and prints one JSON line per record:
//
//   {"sha256": "...", "label": 3, "id": 1234, "values": 784, "values_sha256": "..."}
//
// sha256 is the hash of the record's payload as the library framed it (after
// it checked both masked CRC32C values); label and id are the int64 features
// as the library decoded them; values is the length of the "features"
// float_list or of the "image" bytes, values_sha256 the hash of those values
// (float32 little endian, or the raw bytes).
//
// Usage: node read_part.js FILE...
// Exits 1 if the library rejects a record (it logs "Wrong ... CRC" and stops)
// or fails to decode one.
"use strict";

const crypto = require("crypto");
const fs = require("fs");
const { TFRecordsReader } = require("@roboflow/tfrecords/src/tensorFlowReader");
const { FeatureType } = require("@roboflow/tfrecords/src/tensorFlowBuilder");
const pb = require("@roboflow/tfrecords/src/tensorFlowRecordsProtoBuf_pb");

// The reader keeps only the decoded messages. To see the exact payload bytes
// it framed and CRC-checked, wrap the protobuf decoder it hands them to.
const payloads = [];
const deserialize = pb.TFRecordsImageMessage.deserializeBinary;
pb.TFRecordsImageMessage.deserializeBinary = function (bytes) {
  payloads.push(Buffer.from(bytes));
  return deserialize.call(this, bytes);
};

// The reader reports a CRC mismatch with console.log and stops reading.
const complaints = [];
console.log = (...args) => complaints.push(args.join(" "));

const sha256 = (b) => crypto.createHash("sha256").update(b).digest("hex");

function values(reader, i) {
  const fmap = reader.imageMessages[i].getContext().getFeatureMap();
  if (fmap.get("features")) {
    const floats = reader.getArrayFeature(i, "features", FeatureType.Float);
    const b = Buffer.alloc(4 * floats.length);
    floats.forEach((v, k) => b.writeFloatLE(v, 4 * k));
    return [floats.length, sha256(b)];
  }
  if (fmap.get("image")) {
    const img = Buffer.from(reader.getFeature(i, "image", FeatureType.Binary));
    return [img.length, sha256(img)];
  }
  return [0, sha256(Buffer.alloc(0))];
}

const out = [];
for (const file of process.argv.slice(2)) {
  payloads.length = 0;
  const reader = new TFRecordsReader(fs.readFileSync(file));
  if (complaints.length > 0) {
    process.stderr.write(`${file}: @roboflow/tfrecords rejected a record after ${reader.length}: ${complaints.join("; ")}\n`);
    process.exit(1);
  }
  if (payloads.length !== reader.length) {
    process.stderr.write(`${file}: ${payloads.length} payloads framed, ${reader.length} decoded\n`);
    process.exit(1);
  }
  for (let i = 0; i < reader.length; i++) {
    const [n, vh] = values(reader, i);
    out.push(JSON.stringify({
      sha256: sha256(payloads[i]),
      label: Number(reader.getFeature(i, "label", FeatureType.Int64)),
      id: Number(reader.getFeature(i, "id", FeatureType.Int64)),
      values: n,
      values_sha256: vh,
    }));
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
