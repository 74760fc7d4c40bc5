// ONNX Runtime (onnxruntime-node, CPU) for dlc's scripts.
//   node ort.js optimize MODEL.onnx LEVEL OUT.onnx   save ORT's optimized graph (LEVEL: basic|extended|all)
//   node ort.js run MODEL.onnx OUTDIR NAME=FILE.npy...  run the model, write OUTDIR/<output>.npy
//     (ORT_OPT_LEVEL=basic|extended|all sets the graph optimization level; default all)
// Install with: ONNXRUNTIME_NODE_INSTALL=skip npm install (in this directory).
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const dtypes = { '<f4': 'float32', '<f8': 'float64', '<f2': 'float16', '<i8': 'int64', '<i4': 'int32',
                 '|b1': 'bool', '|u1': 'uint8', '|i1': 'int8' };
// float16 tensors hold their IEEE bits.
const arrays = { float32: Float32Array, float64: Float64Array, float16: Uint16Array, int64: BigInt64Array,
                 int32: Int32Array, bool: Uint8Array, uint8: Uint8Array, int8: Int8Array };

function readNpy(file) {
  const b = fs.readFileSync(file);
  const major = b[6];
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = b.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').filter(s => s.trim()).map(Number);
  const type = dtypes[descr];
  if (!type) throw new Error(`${file}: unsupported dtype ${descr}`);
  const data = b.subarray(start + hlen);
  const copy = new Uint8Array(data.length);
  copy.set(data);
  return new ort.Tensor(type, new arrays[type](copy.buffer), shape);
}

function writeNpy(file, t) {
  const descr = { float32: '<f4', float64: '<f8', float16: '<f2', int64: '<i8', int32: '<i4', bool: '|b1',
                  uint8: '|u1', int8: '|i1' }[t.type];
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${t.dims.join(', ')}${t.dims.length === 1 ? ',' : ''}), }`;
  while ((10 + header.length + 1) % 64 !== 0) header += ' ';
  header += '\n';
  const pre = Buffer.alloc(10);
  Buffer.from('\x93NUMPY', 'latin1').copy(pre, 0);
  pre[6] = 1; pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const body = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), body]));
}

async function main() {
  const [cmd, model, ...rest] = process.argv.slice(2);
  if (cmd === 'optimize') {
    const [level, out] = rest;
    await ort.InferenceSession.create(model, { graphOptimizationLevel: level, optimizedModelFilePath: out,
                                               executionProviders: ['cpu'] });
  } else if (cmd === 'run') {
    const [outDir, ...specs] = rest;
    const options = { executionProviders: ['cpu'] };
    if (process.env.ORT_OPT_LEVEL) options.graphOptimizationLevel = process.env.ORT_OPT_LEVEL;
    const session = await ort.InferenceSession.create(model, options);
    const feeds = {};
    for (const s of specs) {
      const eq = s.indexOf('=');
      feeds[s.slice(0, eq)] = readNpy(s.slice(eq + 1));
    }
    const results = await session.run(feeds);
    fs.mkdirSync(outDir, { recursive: true });
    for (const [name, t] of Object.entries(results))
      writeNpy(path.join(outDir, name.replace(/[^A-Za-z0-9_.-]/g, '_') + '.npy'), t);
  } else {
    console.error('usage: node ort.js optimize MODEL LEVEL OUT | run MODEL OUTDIR NAME=FILE...');
    process.exit(2);
  }
}

main().catch(e => { console.error(`ort.js: ${e.message}`); process.exit(1); });
