//! How cuDNN implementations are put in accuracy classes and named, without a GPU.

use convkit::conv::cudnn::{
    MathClass,
    engines::{classify, config_tag, note_name},
    legacy::Math,
};

#[test]
fn numerical_notes_decide_the_class() {
    // cudnnBackendNumericalNote_t: 0 tensor core, 1 down-convert inputs, 2 reduced-precision
    // reduction, 3 FFT, 4 non-deterministic, 5 Winograd, 9 strict NaN propagation.
    assert_eq!(classify(&[]), MathClass::Exact);
    assert_eq!(classify(&[3]), MathClass::Exact);
    assert_eq!(classify(&[5, 6, 4, 9]), MathClass::Exact);
    assert_eq!(classify(&[0]), MathClass::Fast);
    assert_eq!(classify(&[1, 4]), MathClass::Fast);
    assert_eq!(classify(&[9, 2]), MathClass::Fast);
    assert_eq!(note_name(0), "tensor_core");
    assert_eq!(note_name(42), "note42");
}

#[test]
fn legacy_math_modes_map_to_classes() {
    // DEFAULT math lets cuDNN use TF32 where it likes, and cuDNN does not say where it did.
    assert_eq!(Math::Fma.class(), MathClass::Exact);
    assert_eq!(Math::Default.class(), MathClass::Fast);
}

#[test]
fn configurations_are_named_as_cudnn_frontend_names_them() {
    assert_eq!(config_tag(28, &[]), "eng28");
    assert_eq!(config_tag(0, &[(3, 0), (2, 1)]), "eng0_k2=1_k3=0");
}
