"""The PySpark data source `flux`. Arrives with the Spark issue.
"""
