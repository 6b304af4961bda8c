"""spark_bridge"""
