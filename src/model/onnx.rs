//! ONNX export of fitted models, with hand-written prost messages for the few ONNX types needed
//! (no protoc, no build script). Field numbers follow onnx.proto (IR version 8, opset 17).
//!
//! Graphs use only standard operators so any runtime can run them: the scaler is folded into the
//! weights, then `Gemm` gives the decision value; logistic adds `Sigmoid`. Computation is in
//! double precision, matching [`crate::train::Predict`] to rounding error.
//!
//! Inputs: `x` — `double[N, d]` feature rows. Outputs: `decision` — `double[N, 1]`; logistic
//! also `probability` — `double[N, 1]`. The slot SVR: `x` — `double[N, 3·d]` slot rows, output
//! `level` — `double[N, 1]` (squared distances by MatMul → Exp → MatMul → Add).

use prost::Message;

use super::{EstimatorModel, ModelFile};

#[derive(Clone, PartialEq, prost::Message)]
struct ModelProto {
    #[prost(int64, tag = "1")]
    ir_version: i64,
    #[prost(string, tag = "2")]
    producer_name: String,
    #[prost(string, tag = "3")]
    producer_version: String,
    #[prost(string, tag = "6")]
    doc_string: String,
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "8")]
    opset_import: Vec<OperatorSetIdProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    domain: String,
    #[prost(int64, tag = "2")]
    version: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(message, repeated, tag = "5")]
    initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    output: Vec<ValueInfoProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    output: Vec<String>,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, tag = "4")]
    op_type: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(string, tag = "8")]
    name: String,
    #[prost(double, repeated, tag = "10")]
    double_data: Vec<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ValueInfoProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    r#type: Option<TypeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TypeProto {
    #[prost(message, optional, tag = "1")]
    tensor_type: Option<TensorTypeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TensorTypeProto {
    #[prost(int32, tag = "1")]
    elem_type: i32,
    #[prost(message, optional, tag = "2")]
    shape: Option<TensorShapeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    dim: Vec<Dimension>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Dimension {
    #[prost(int64, optional, tag = "1")]
    dim_value: Option<i64>,
    #[prost(string, optional, tag = "2")]
    dim_param: Option<String>,
}

const DOUBLE: i32 = 11;

fn tensor_info(name: &str, dims: [Option<i64>; 2]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| match d {
            Some(v) => Dimension {
                dim_value: Some(*v),
                dim_param: None,
            },
            None => Dimension {
                dim_value: None,
                dim_param: Some("N".into()),
            },
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorTypeProto {
                elem_type: DOUBLE,
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
    }
}

fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name: format!("{op}_{output}"),
        op_type: op.into(),
    }
}

/// Errors of export.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// The model kind has no ONNX form.
    #[error("{0} models have no ONNX export")]
    Unsupported(&'static str),
}

fn tensor(name: &str, dims: &[i64], data: Vec<f64>) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: DOUBLE,
        name: name.into(),
        double_data: data,
    }
}

/// Linear models: `Gemm(x, W, B)` (+ `Sigmoid`).
fn linear_graph(d: i64, w: Vec<f64>, b: f64, logistic: bool) -> GraphProto {
    let mut nodes = vec![node("Gemm", &["x", "W", "B"], "decision")];
    let mut outputs = vec![tensor_info("decision", [None, Some(1)])];
    if logistic {
        nodes.push(node("Sigmoid", &["decision"], "probability"));
        outputs.push(tensor_info("probability", [None, Some(1)]));
    }
    GraphProto {
        node: nodes,
        name: "aggrate".into(),
        initializer: vec![tensor("W", &[d, 1], w), tensor("B", &[1], vec![b])],
        input: vec![tensor_info("x", [None, Some(d)])],
        output: outputs,
    }
}

/// RBF SVR on slot rows: z = (x − μ)/σ; ‖z − s‖² = z·z − 2 z·s + s·s (MatMul against the
/// transposed support vectors); level = exp(−γ‖z − s‖²)·coef + b.
fn svr_graph(m: &crate::train::SvrModel) -> GraphProto {
    let d = m.width();
    let nsv = m.n_support();
    let mut st = vec![0.0; d * nsv]; // d × nsv
    let mut ss = vec![0.0; nsv];
    for (k, sv) in m.support.chunks_exact(d.max(1)).enumerate() {
        for j in 0..d {
            st[j * nsv + k] = sv[j];
        }
        ss[k] = sv.iter().map(|v| v * v).sum();
    }
    let (di, ni) = (d as i64, nsv as i64);
    GraphProto {
        node: vec![
            node("Sub", &["x", "MEAN"], "xc"),
            node("Div", &["xc", "STD"], "z"),
            node("Mul", &["z", "z"], "z2"),
            node("MatMul", &["z2", "ONES"], "zz"),
            node("MatMul", &["z", "ST"], "zs"),
            node("Mul", &["zs", "MINUS_TWO"], "zs2"),
            node("Add", &["zz", "zs2"], "partial"),
            node("Add", &["partial", "SS"], "dist"),
            node("Mul", &["dist", "MINUS_GAMMA"], "arg"),
            node("Exp", &["arg"], "k"),
            node("MatMul", &["k", "COEF"], "kc"),
            node("Add", &["kc", "B"], "level"),
        ],
        name: "aggrate_slot_svr".into(),
        initializer: vec![
            tensor("MEAN", &[1, di], m.scaler.mean.clone()),
            tensor("STD", &[1, di], m.scaler.std.clone()),
            tensor("ONES", &[di, 1], vec![1.0; d]),
            tensor("ST", &[di, ni], st),
            tensor("MINUS_TWO", &[1], vec![-2.0]),
            tensor("SS", &[1, ni], ss),
            tensor("MINUS_GAMMA", &[1], vec![-m.gamma]),
            tensor("COEF", &[ni, 1], m.coef.clone()),
            tensor("B", &[1], vec![m.b]),
        ],
        input: vec![tensor_info("x", [None, Some(di)])],
        output: vec![tensor_info("level", [None, Some(1)])],
    }
}

/// Perceptron: `Gemm(x, W1, B1)` → `Relu` → `Gemm(·, W2, B2)` → decision (+ `Sigmoid`), in
/// double precision from the f32 weights (exact copies). A calibrated load offset
/// ([`crate::model::LoadOffset`]) is subtracted as a sum of clamped ramps of its input:
/// `t₀ + Σ sᵢ·(clamp(x, xᵢ, xᵢ₊₁) − xᵢ)`, which is flat outside the knots as the runtime's is.
fn mlp_graph(m: &crate::model::MlpModel) -> GraphProto {
    let (d, h) = (m.inputs as i64, m.hidden as i64);
    let f = |v: &[f32]| v.iter().map(|x| *x as f64).collect::<Vec<f64>>();
    let skip = if m.skip.is_empty() {
        vec![0.0; m.inputs]
    } else {
        f(&m.skip)
    };
    let mut nodes = vec![
        node("Gemm", &["x", "W1", "B1"], "pre"),
        node("Relu", &["pre"], "hid"),
        node("Gemm", &["hid", "W2", "B2"], "deep"),
        node("MatMul", &["x", "SKIP"], "wide"),
    ];
    let mut initializer = vec![
        tensor("W1", &[d, h], f(&m.w1)),
        tensor("B1", &[h], f(&m.b1)),
        tensor("W2", &[h, 1], f(&m.w2)),
        tensor("B2", &[1], vec![m.b2 as f64]),
        tensor("SKIP", &[d, 1], skip),
    ];
    match m.load_offset.as_ref().filter(|o| !o.knots.is_empty()) {
        None => nodes.push(node("Add", &["deep", "wide"], "decision")),
        Some(o) => {
            nodes.push(node("Add", &["deep", "wide"], "raw"));
            let k = &o.knots;
            initializer.push(tensor("T0", &[1], vec![k[0][1]]));
            if k.len() == 1 {
                nodes.push(node("Sub", &["raw", "T0"], "decision"));
            } else {
                let n = (k.len() - 1) as i64;
                let mut sel = vec![0.0; m.inputs];
                if let Some(v) = sel.get_mut(o.input) {
                    *v = 1.0;
                }
                let lo: Vec<f64> = k[..k.len() - 1].iter().map(|p| p[0]).collect();
                let hi: Vec<f64> = k[1..].iter().map(|p| p[0]).collect();
                let slope: Vec<f64> = k
                    .windows(2)
                    .map(|w| (w[1][1] - w[0][1]) / (w[1][0] - w[0][0]))
                    .collect();
                nodes.extend([
                    node("MatMul", &["x", "LOAD_SEL"], "load"),
                    node("Max", &["load", "KNOT_LO"], "load_lo"),
                    node("Min", &["load_lo", "KNOT_HI"], "load_clamped"),
                    node("Sub", &["load_clamped", "KNOT_LO"], "ramps"),
                    node("MatMul", &["ramps", "SLOPES"], "ramp"),
                    node("Add", &["ramp", "T0"], "offset"),
                    node("Sub", &["raw", "offset"], "decision"),
                ]);
                initializer.extend([
                    tensor("LOAD_SEL", &[d, 1], sel),
                    tensor("KNOT_LO", &[1, n], lo),
                    tensor("KNOT_HI", &[1, n], hi),
                    tensor("SLOPES", &[n, 1], slope),
                ]);
            }
        }
    }
    nodes.push(node("Sigmoid", &["decision"], "probability"));
    GraphProto {
        node: nodes,
        name: "aggrate_mlp".into(),
        initializer,
        input: vec![tensor_info("x", [None, Some(d)])],
        output: vec![
            tensor_info("decision", [None, Some(1)]),
            tensor_info("probability", [None, Some(1)]),
        ],
    }
}

/// Serialise a model file's estimator as an ONNX model. A slot-SVR file exports its SVR (input:
/// slot rows of `3·d` features; output `level`); its per-packet logistic part is the same graph
/// as a logistic file's.
pub fn export(file: &ModelFile) -> Result<Vec<u8>, ExportError> {
    let d = file.spec.width() as i64;
    let graph = match &file.model {
        EstimatorModel::Logistic(m) => {
            let (w, b) = m.scaler.fold(&m.w, m.b);
            linear_graph(d, w, b, true)
        }
        EstimatorModel::LinearSvm(m) => {
            let (w, b) = m.scaler.fold(&m.w, m.b);
            linear_graph(d, w, b, false)
        }
        EstimatorModel::Threshold(t) => {
            // decision = x₀ − threshold: a one-hot weight vector.
            let mut w = vec![0.0; d as usize];
            w[0] = 1.0;
            linear_graph(d, w, -t.threshold_us, false)
        }
        EstimatorModel::SlotSvr(m) => svr_graph(&m.svr),
        EstimatorModel::Mlp(m) => mlp_graph(m),
    };
    let model = ModelProto {
        ir_version: 8,
        producer_name: "aggrate".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: format!(
            "aggrate {} estimator; feature spec {}",
            file.model.kind(),
            serde_json::to_string(&file.spec).unwrap_or_default()
        ),
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
    };
    Ok(model.encode_to_vec())
}
