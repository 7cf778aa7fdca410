//! The convolution through cuDNN's graph (backend) API: one forward-convolution operation
//! graph, the engine configurations its heuristics propose, execution plans built from them,
//! and their execution. This is the path cudnn-frontend and PyTorch take to cuDNN 9's engines
//! (the `sm90_xmma_*` implicit GEMMs among them), which the legacy API never reaches.

use super::{Handle, MathClass, Operands, require_library};
use crate::{Conv2d, ConvGeometry, Error, Gpu, Result, TensorLayout, error::Context};
use cudarc::{
    cudnn::sys::{
        self, cudnnBackendAttributeName_t as Attr, cudnnBackendAttributeType_t as Type,
        cudnnBackendDescriptorType_t as Kind,
    },
    driver::{CudaStream, DevicePtr, DevicePtrMut},
};
use std::sync::Arc;

pub use sys::cudnnBackendHeurMode_t as HeurMode;

/// The heuristic modes cudnn-frontend and PyTorch draw configurations from, and the
/// fallback list.
pub const ALL_HEURISTICS: [HeurMode; 4] = [
    HeurMode::CUDNN_HEUR_MODE_INSTANT,
    HeurMode::CUDNN_HEUR_MODE_A,
    HeurMode::CUDNN_HEUR_MODE_B,
    HeurMode::CUDNN_HEUR_MODE_FALLBACK,
];

/// Tensor alignment promised to cuDNN; [`EngineConv::execute`] checks every pointer.
pub const ALIGNMENT: usize = 16;

/// Room for every note and knob type this binding knows (cudnn-frontend asks for as many).
const MAX_NOTES: usize = sys::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_TYPE_COUNT as usize;
const MAX_KNOBS: usize = sys::cudnnBackendKnobType_t::CUDNN_KNOB_TYPE_COUNTS as usize;

const X_UID: i64 = b'x' as i64;
const W_UID: i64 = b'w' as i64;
const Y_UID: i64 = b'y' as i64;

/// Numerical notes (`cudnnBackendNumericalNote_t`) that put an engine in the fast class:
/// tensor cores, inputs down-converted (f32 to TF32), reduced-precision reduction.
const FAST_NOTES: [u32; 3] = [0, 1, 2];

/// The class an engine's numerical notes put it in.
pub fn classify(numerical_notes: &[u32]) -> MathClass {
    if numerical_notes.iter().any(|n| FAST_NOTES.contains(n)) { MathClass::Fast } else { MathClass::Exact }
}

/// A short label for a numerical note.
pub fn note_name(note: u32) -> String {
    match note {
        0 => "tensor_core".into(),
        1 => "down_convert".into(),
        2 => "reduced_precision".into(),
        3 => "fft".into(),
        4 => "nondeterministic".into(),
        5 => "winograd".into(),
        6 => "winograd_4x4".into(),
        7 => "winograd_6x6".into(),
        8 => "winograd_13x13".into(),
        9 => "strict_nan".into(),
        other => format!("note{other}"),
    }
}

/// cudnn-frontend's name for a configuration: `eng{global index}` and `_k{knob}={value}`
/// for each knob choice, in knob order.
pub fn config_tag(engine: i64, knobs: &[(u32, i64)]) -> String {
    let mut sorted = knobs.to_vec();
    sorted.sort_unstable();
    let mut tag = format!("eng{engine}");
    for (knob, value) in sorted {
        tag.push_str(&format!("_k{knob}={value}"));
    }
    tag
}

/// A backend descriptor, destroyed on drop.
struct Desc(sys::cudnnBackendDescriptor_t);

impl Drop for Desc {
    fn drop(&mut self) {
        unsafe { sys::cudnnBackendDestroyDescriptor(self.0) }.result().ok();
    }
}

impl Desc {
    fn new(kind: Kind) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        unsafe { sys::cudnnBackendCreateDescriptor(kind, &mut raw) }.result().during("cudnnBackendCreateDescriptor")?;
        Ok(Desc(raw))
    }

    fn set<T>(&self, name: Attr, ty: Type, values: &[T]) -> Result<()> {
        unsafe { sys::cudnnBackendSetAttribute(self.0, name, ty, values.len() as i64, values.as_ptr().cast()) }
            .result()
            .during("cudnnBackendSetAttribute")
    }

    fn set_i64s(&self, name: Attr, values: &[i64]) -> Result<()> {
        self.set(name, Type::CUDNN_TYPE_INT64, values)
    }

    fn set_descs(&self, name: Attr, descs: &[&Desc]) -> Result<()> {
        let raw: Vec<_> = descs.iter().map(|d| d.0).collect();
        self.set(name, Type::CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw)
    }

    fn finalize(self, what: &'static str) -> Result<Self> {
        unsafe { sys::cudnnBackendFinalize(self.0) }.result().during(what)?;
        Ok(self)
    }

    /// How many elements attribute `name` holds.
    fn count(&self, name: Attr, ty: Type) -> Result<usize> {
        let mut count = 0i64;
        unsafe { sys::cudnnBackendGetAttribute(self.0, name, ty, 0, &mut count, std::ptr::null_mut()) }
            .result()
            .during("cudnnBackendGetAttribute(count)")?;
        Ok(count.max(0) as usize)
    }

    /// Up to `max` elements of a plain attribute (integers, enums read as `u32`).
    fn get<T: Copy + Default>(&self, name: Attr, ty: Type, max: usize) -> Result<Vec<T>> {
        let mut values = vec![T::default(); max];
        let mut count = 0i64;
        unsafe { sys::cudnnBackendGetAttribute(self.0, name, ty, max as i64, &mut count, values.as_mut_ptr().cast()) }
            .result()
            .during("cudnnBackendGetAttribute")?;
        values.truncate((count.max(0) as usize).min(max));
        Ok(values)
    }

    /// Up to `max` of the descriptors attribute `name` holds, each copied into a new
    /// descriptor of `kind` (cuDNN fills descriptors the caller created).
    fn get_descs(&self, name: Attr, kind: Kind, max: usize) -> Result<Vec<Desc>> {
        let count = max;
        let descs = (0..count).map(|_| Desc::new(kind)).collect::<Result<Vec<_>>>()?;
        let mut raw: Vec<_> = descs.iter().map(|d| d.0).collect();
        let mut got = 0i64;
        unsafe {
            sys::cudnnBackendGetAttribute(
                self.0,
                name,
                Type::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                count as i64,
                &mut got,
                raw.as_mut_ptr().cast(),
            )
        }
        .result()
        .during("cudnnBackendGetAttribute(descriptors)")?;
        let mut descs = descs;
        descs.truncate((got.max(0) as usize).min(count));
        Ok(descs)
    }
}

/// An engine configuration proposed by cuDNN's heuristics.
pub struct EngineConfig {
    desc: Desc,
    /// The engine's global index.
    pub engine: i64,
    /// `(cudnnBackendKnobType_t, value)` of each knob choice.
    pub knobs: Vec<(u32, i64)>,
    pub numerical_notes: Vec<u32>,
}

impl EngineConfig {
    fn read(desc: Desc) -> Result<Self> {
        let engine = desc
            .get_descs(Attr::CUDNN_ATTR_ENGINECFG_ENGINE, Kind::CUDNN_BACKEND_ENGINE_DESCRIPTOR, 1)?
            .pop()
            .ok_or_else(|| Error::CudnnUnsupported("an engine configuration without an engine".into()))?;
        let index = engine.get::<i64>(Attr::CUDNN_ATTR_ENGINE_GLOBAL_INDEX, Type::CUDNN_TYPE_INT64, 1)?;
        let engine_index =
            *index.first().ok_or_else(|| Error::CudnnUnsupported("an engine without an index".into()))?;
        // Enums are read as u32: a newer library may name notes this binding does not know.
        let numerical_notes =
            engine.get::<u32>(Attr::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, Type::CUDNN_TYPE_NUMERICAL_NOTE, MAX_NOTES)?;
        let mut knobs = Vec::new();
        let choices = desc.get_descs(
            Attr::CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
            Kind::CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
            MAX_KNOBS,
        )?;
        for choice in choices {
            let knob = choice.get::<u32>(Attr::CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, Type::CUDNN_TYPE_KNOB_TYPE, 1)?;
            let value = choice.get::<i64>(Attr::CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, Type::CUDNN_TYPE_INT64, 1)?;
            if let (Some(&k), Some(&v)) = (knob.first(), value.first()) {
                knobs.push((k, v));
            }
        }
        knobs.sort_unstable();
        Ok(EngineConfig { desc, engine: engine_index, knobs, numerical_notes })
    }

    pub fn tag(&self) -> String {
        config_tag(self.engine, &self.knobs)
    }

    pub fn class(&self) -> MathClass {
        classify(&self.numerical_notes)
    }

    pub fn notes(&self) -> String {
        self.numerical_notes.iter().map(|&n| note_name(n)).collect::<Vec<_>>().join(",")
    }
}

/// An execution plan, ready to run on the [`EngineConv`] that built it.
pub struct EnginePlan {
    // Field order is drop order: the plan before its configuration.
    desc: Desc,
    config: EngineConfig,
    /// The operation graph it was built for.
    graph: sys::cudnnBackendDescriptor_t,
    /// Bytes of workspace it needs.
    pub workspace: usize,
}

impl EnginePlan {
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn tag(&self) -> String {
        self.config.tag()
    }

    pub fn class(&self) -> MathClass {
        self.config.class()
    }
}

/// One convolution problem as a cuDNN operation graph, run on one stream.
pub struct EngineConv<'g> {
    gpu: &'g Gpu,
    stream: Arc<CudaStream>,
    geom: ConvGeometry,
    // Field order is drop order: the graph before what it refers to, the handle last.
    graph: Desc,
    _operation: Desc,
    _parts: [Desc; 4],
    handle: Handle,
}

impl<'g> EngineConv<'g> {
    /// The graph of `conv` (in its layout, f32, f32 compute), run on `stream`.
    pub fn new(gpu: &'g Gpu, stream: &Arc<CudaStream>, conv: &Conv2d) -> Result<Self> {
        require_library()?;
        let geom = conv.geometry()?;
        let handle = Handle::new(gpu, stream)?;
        let i = |v: usize| v as i64;
        let x = tensor(X_UID, [i(conv.n), i(conv.c), i(conv.h), i(conv.w)], conv.layout)?;
        let w = tensor(W_UID, [i(conv.k), i(geom.c_per_group), i(conv.r), i(conv.s)], conv.layout)?;
        let y = tensor(Y_UID, [i(conv.n), i(conv.k), i(geom.out_h), i(geom.out_w)], conv.layout)?;

        let desc = Desc::new(Kind::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
        desc.set(
            Attr::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
            Type::CUDNN_TYPE_DATA_TYPE,
            &[sys::cudnnDataType_t::CUDNN_DATA_FLOAT],
        )?;
        desc.set(
            Attr::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
            Type::CUDNN_TYPE_CONVOLUTION_MODE,
            &[sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION],
        )?;
        desc.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[2])?;
        desc.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_DILATIONS, &conv.dilation.map(i))?;
        desc.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, &conv.stride.map(i))?;
        desc.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &conv.pad.map(i))?;
        desc.set_i64s(Attr::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &conv.pad.map(i))?;
        let desc = desc.finalize("cudnnBackendFinalize(convolution)")?;

        let op = Desc::new(Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)?;
        op.set_descs(Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, &[&x])?;
        op.set_descs(Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, &[&w])?;
        op.set_descs(Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, &[&y])?;
        op.set_descs(Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, &[&desc])?;
        op.set(Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, Type::CUDNN_TYPE_FLOAT, &[1.0f32])?;
        op.set(Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, Type::CUDNN_TYPE_FLOAT, &[0.0f32])?;
        let op = op.finalize("cudnnBackendFinalize(convolution forward operation)")?;

        let graph = Desc::new(Kind::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        graph.set(Attr::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, Type::CUDNN_TYPE_HANDLE, &[handle.0])?;
        graph.set_descs(Attr::CUDNN_ATTR_OPERATIONGRAPH_OPS, &[&op])?;
        let graph = graph.finalize("cudnnBackendFinalize(operation graph)")?;
        Ok(EngineConv { gpu, stream: stream.clone(), geom, graph, _operation: op, _parts: [x, w, y, desc], handle })
    }

    /// The configurations the heuristics propose in `modes`, each once (by tag), in the
    /// order first proposed. A mode that fails is reported in the second list.
    pub fn configs(&self, modes: &[HeurMode]) -> (Vec<EngineConfig>, Vec<(HeurMode, Error)>) {
        let mut configs: Vec<EngineConfig> = Vec::new();
        let mut failed = Vec::new();
        for &mode in modes {
            match self.heuristic(mode) {
                Ok(found) => {
                    for config in found {
                        if !configs.iter().any(|c| c.engine == config.engine && c.knobs == config.knobs) {
                            configs.push(config);
                        }
                    }
                }
                Err(e) => failed.push((mode, e)),
            }
        }
        (configs, failed)
    }

    fn heuristic(&self, mode: HeurMode) -> Result<Vec<EngineConfig>> {
        let heur = Desc::new(Kind::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
        heur.set_descs(Attr::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[&self.graph])?;
        heur.set(Attr::CUDNN_ATTR_ENGINEHEUR_MODE, Type::CUDNN_TYPE_HEUR_MODE, &[mode])?;
        let heur = heur.finalize("cudnnBackendFinalize(engine heuristics)")?;
        let count = heur.count(Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS, Type::CUDNN_TYPE_BACKEND_DESCRIPTOR)?;
        heur.get_descs(Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS, Kind::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, count)?
            .into_iter()
            .map(EngineConfig::read)
            .collect()
    }

    /// Builds the execution plan of `config` (fails for configurations that cannot run
    /// this problem: see [`super::is_unsupported`]).
    pub fn build(&self, config: EngineConfig) -> Result<EnginePlan> {
        let plan = Desc::new(Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
        plan.set(Attr::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, Type::CUDNN_TYPE_HANDLE, &[self.handle.0])?;
        plan.set_descs(Attr::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[&config.desc])?;
        let plan = plan.finalize("cudnnBackendFinalize(execution plan)")?;
        let workspace = plan.get::<i64>(Attr::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, Type::CUDNN_TYPE_INT64, 1)?;
        let workspace = workspace.first().copied().unwrap_or(0).max(0) as usize;
        Ok(EnginePlan { desc: plan, config, graph: self.graph.0, workspace })
    }

    /// `y = conv(x, w)` with `plan`. Every buffer must be [`ALIGNMENT`]-aligned and
    /// `workspace` must hold `plan.workspace` bytes.
    pub fn execute(
        &self,
        plan: &EnginePlan,
        x: &impl DevicePtr<f32>,
        w: &impl DevicePtr<f32>,
        y: &mut impl DevicePtrMut<f32>,
        workspace: &mut impl DevicePtrMut<u8>,
    ) -> Result<()> {
        super::super::check_buffers(self.gpu, &self.geom, x, w, y)?;
        if plan.graph != self.graph.0 {
            return Err(Error::CudnnUnsupported(format!("plan {} belongs to another convolution", plan.tag())));
        }
        if workspace.len() < plan.workspace {
            return Err(Error::WorkspaceTooSmall { needed: plan.workspace, given: workspace.len() });
        }
        {
            let ops = Operands::new(&self.stream, x, w, y, workspace);
            for (buffer, ptr) in [("x", ops.x), ("w", ops.w), ("y", ops.y.cast_const())] {
                if !(ptr as usize).is_multiple_of(ALIGNMENT) {
                    return Err(Error::Misaligned {
                        buffer,
                        align: ALIGNMENT,
                        reason: "cuDNN's engines were promised",
                    });
                }
            }
            let pack = Desc::new(Kind::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
            pack.set_i64s(Attr::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &[X_UID, W_UID, Y_UID])?;
            let pointers = [ops.x.cast_mut(), ops.w.cast_mut(), ops.y];
            pack.set(Attr::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, Type::CUDNN_TYPE_VOID_PTR, &pointers)?;
            pack.set(Attr::CUDNN_ATTR_VARIANT_PACK_WORKSPACE, Type::CUDNN_TYPE_VOID_PTR, &[ops.workspace])?;
            let pack = pack.finalize("cudnnBackendFinalize(variant pack)")?;
            unsafe { sys::cudnnBackendExecute(self.handle.0, plan.desc.0, pack.0) }
                .result()
                .during("cudnnBackendExecute")?;
        }
        self.gpu.check_deferred()
    }
}

/// A packed f32 tensor descriptor of NCHW (or KCRS) `dims`, stored in `layout` (NHWC: KRSC).
fn tensor(uid: i64, dims: [i64; 4], layout: TensorLayout) -> Result<Desc> {
    let [_, c, h, w] = dims;
    let strides = match layout {
        TensorLayout::Nchw => [c * h * w, h * w, w, 1],
        TensorLayout::Nhwc => [h * w * c, 1, w * c, c],
    };
    let t = Desc::new(Kind::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    t.set(Attr::CUDNN_ATTR_TENSOR_DATA_TYPE, Type::CUDNN_TYPE_DATA_TYPE, &[sys::cudnnDataType_t::CUDNN_DATA_FLOAT])?;
    t.set_i64s(Attr::CUDNN_ATTR_TENSOR_DIMENSIONS, &dims)?;
    t.set_i64s(Attr::CUDNN_ATTR_TENSOR_STRIDES, &strides)?;
    t.set_i64s(Attr::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
    t.set_i64s(Attr::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[ALIGNMENT as i64])?;
    t.finalize("cudnnBackendFinalize(tensor)")
}
