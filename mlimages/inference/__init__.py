"""What a trained model becomes.

    serving.py             the one inference graph: encoded images -> scores, as a
                           SavedModel or in a session
    export.py              a checkpoint as a SavedModel (--mode=export, --export_dir)
    saved_models.py        a SavedModel on disk: versions and the assets.extra/ files
    onnx_export.py         the float signature as an ONNX model, checked against TensorFlow
    openvino_engine.py     --engine openvino: the float network compiled by OpenVINO (fp32,
                           bf16) behind the Predictor's interface
    batch_outputs.py       the inference commands' result files: every image through a
                           Predictor, the results written whole
    inference_io.py        inference inputs (images, lists, the class dictionary) and
                           result files
    inference_settings.py  the trained settings of a checkpoint, from its run's flags.txt
    pca.py                 PCA of features: fitted once, applied unchanged"""
